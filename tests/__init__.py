"""gpucal's test suite (a package, so that ``tests.*`` imports resolve here before any installed ``tests``)."""
