# tests/preload/sort_input.awk: sort's input for the preload checks, `lines`
# lines of a hex key, a number, a word and the line number:
#
#   awk -v lines=N -f tests/preload/sort_input.awk
#
# awk's numbers are doubles; the generator's products stay below 2^53, so
# every awk (GNU, mawk, busybox in the AArch64 VMs) writes the same file.
BEGIN {
  x = 1
  for (i = 0; i < lines; i++) {
    x = (x * 69069 + 1) % 4294967296
    y = (x * 69069 + 1) % 4294967296
    # %x in two halves: busybox's awk prints 80000000 for 2^31 and above.
    printf "%04x%04x %d %s-%d\n", int(x / 65536), x % 65536, y % 100000,
      substr("abcdefghijklmnopqrstuvwxyz", x % 26 + 1, y % 13 + 1), i
    x = y
  }
}
