# Reads `llvm-objdump -d` of a Thumb binary and prints every function
# reachable from the function named `root` (an awk -v variable) through
# direct calls and branches (bl, blx <label>, b, b.w, conditional and
# compare-and-branch forms), one name a line, the root first. An indirect
# call (blx/bx through a register other than lr) is printed as
# "INDIRECT <function>": the walk cannot follow it.
/^[0-9a-f]+ <[^>]+>:$/ {
  fn = $2
  sub(/^</, "", fn)
  sub(/>:$/, "", fn)
  next
}
fn != "" && $0 ~ /\t(bl|blx|b|b\.w|b\.n|beq|bne|bhs|blo|bhi|bls|bge|blt|bgt|ble|bmi|bpl|bcs|bcc|bvs|bvc|cbz|cbnz)(\.w|\.n)?\t/ {
  if (match($0, /<[^>]+>/)) {
    target = substr($0, RSTART + 1, RLENGTH - 2)
    sub(/\+0x[0-9a-f]+$/, "", target)
    if (target != fn) {
      edges[fn] = edges[fn] " " target
    }
  } else if ($0 ~ /\t(blx|bx)\t/ && $0 !~ /\tlr$/) {
    indirect[fn] = 1
  }
}
END {
  queue[1] = root
  seen[root] = 1
  head = 1
  tail = 1
  while (head <= tail) {
    f = queue[head++]
    print f
    if (f in indirect) {
      print "INDIRECT " f
    }
    n = split(edges[f], out, " ")
    for (i = 1; i <= n; i++) {
      if (!(out[i] in seen)) {
        seen[out[i]] = 1
        queue[++tail] = out[i]
      }
    }
  }
}
