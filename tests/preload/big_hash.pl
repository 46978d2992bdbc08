# tests/preload/big_hash.pl: perl's check in the preload tests (a hash of
# 120,000 strings, or $ARGV[0], sorted, partly deleted, joined), run on
# glibc's malloc and with cidmalloc preloaded; the outputs must match.
my $n = $ARGV[0] // 120000;
my %h;
for my $i (1 .. $n) { $h{"key$i"} = join(",", ($i) x ($i % 23)) }
my @k = sort keys %h;
my $s = 0;
$s = ($s * 33 + length($h{$_}) + ord($_)) % 4294967291 for @k;
delete @h{grep { /7/ } @k};
my $j = join("", map { substr($_, 0, 2) } sort values %h);
print scalar(@k), " keys, ", scalar(keys %h), " left, checksum $s, ",
  length($j), "\n";
