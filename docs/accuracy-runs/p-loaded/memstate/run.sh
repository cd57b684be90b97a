#!/bin/bash
B=${B:-target/release/ptlab}
for rep in 1 2 3; do
 for cond in plain compact frag fragcompact; do
  case $cond in
   plain) opt="";; compact) opt="--compact-memory";; frag) opt="--fragment-memory 2560";; fragcompact) opt="--fragment-memory 2560 --compact-memory";;
  esac
  echo "== $rep $cond $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  $B bench fork-4k mprotect-4k --runs 5 -q $opt -o ${OUT:-.}/$cond-$rep.json 2>&1
 done
done
echo DONE
