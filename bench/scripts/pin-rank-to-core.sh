#!/bin/sh
# rank r on cpu r mod 2 (separate cores)
exec taskset -c $((FERRY_RANK % 2)) "$@"
