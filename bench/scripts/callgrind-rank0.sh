#!/bin/sh
# callgrind on rank 0 only
if [ "$FERRY_RANK" = 0 ]; then
  exec valgrind --tool=callgrind --callgrind-out-file=$CGOUT "$@" 2>/dev/null
else
  exec "$@"
fi
