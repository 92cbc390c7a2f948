#!/bin/sh
# gpucal's container entry point: the gpucal CLI, or any command.
#   docker run IMAGE gpucal fit ...        runs the CLI
#   docker run IMAGE fit ...               the same (a gpucal subcommand or option comes first)
#   docker run IMAGE python -m gpucal.distributed.batch ...   any other command runs as given
set -e
case "${1:-}" in
    demo|fit|predict|apply|rules|evaluate|warmup|-*) set -- gpucal "$@" ;;
esac
exec "$@"
