"""gpucal's tests: a package, so ``tests.*`` imports resolve here before any installed ``tests``."""
