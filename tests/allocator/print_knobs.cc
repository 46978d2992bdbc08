// tests/allocator/print_knobs: prints the knob table (os::Knobs()), one knob
// per line, tab-separated:  NAME  VALUES  DEFAULT  HELP
//
// For checks that need files outside Bazel's sandbox, e.g. that README.md
// documents every knob:
//   bazel run //tests/allocator:print_knobs | cut -f1 |
//     while read k; do grep -q "$k" README.md || echo "undocumented: $k"; done
#include <stdio.h>

#include "allocator/os/config.h"

int main() {
  size_t count = 0;
  const cidmalloc::os::KnobInfo* table = cidmalloc::os::Knobs(&count);
  for (size_t i = 0; i < count; ++i) {
    printf("%s\t%s\t%s\t%s\n", table[i].name, table[i].values,
           table[i].default_value, table[i].help);
  }
  return count > 0 ? 0 : 1;
}
