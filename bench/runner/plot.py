"""The plot of ./cidmalloc bench: per workload, each allocator's wall time
and peak RSS as a ratio to glibc (two panels, clustered bars).  The bars
are drawn on a log scale from the 1x line, up when slower / bigger than
glibc, down when faster / smaller, so 0.5x and 2x are equally long.  SVG
via gnuplot."""
import math
import os
import shutil
import subprocess

COLORS = ["#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377"]


def _quote(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write(rows, allocators, path, title):
    """rows: [(workload, {allocator: (time ratio, rss ratio)})].  Writes the
    SVG to path; returns "" on success, else why not."""
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        return "gnuplot not found (./cidmalloc setup installs gnuplot-nox)"
    if not rows or not allocators:
        return "nothing to plot"
    data = path + ".dat"
    values = []
    with open(data, "w") as f:
        for name, ratios in rows:
            cols = []
            for a in allocators:
                pair = ratios.get(a, (None, None))
                cols.append(pair)
                values += [v for v in pair if v]
            f.write(name + "\t" + "\t".join(
                f"{math.log2(t):.4f}" if t else "NaN" for t, _ in cols) + "\t"
                + "\t".join(f"{math.log2(r):.4f}" if r else "NaN" for _, r in cols)
                + "\n")
    if not values:
        os.unlink(data)
        return "no ratios to plot (no glibc results?)"
    # log2 of the ratios; tics at powers of two (and halves if few).
    lo = min(math.log2(min(values)), -0.5)
    hi = max(math.log2(max(values)), 0.5)
    step = 0.5 if hi - lo <= 3 else 1.0
    tics = [k * step for k in range(math.floor(lo / step), math.ceil(hi / step) + 1)]
    ytics = ", ".join(f'"{2 ** t:.3g}x" {t:g}' for t in tics)
    lo, hi = tics[0] - 0.1, tics[-1] + 0.1
    n = len(allocators)
    width = max(900, 70 * len(rows) + 200)

    def panel(first_col, label):
        parts = []
        for i, a in enumerate(allocators):
            parts.append(f"{_quote(data)} using {first_col + i}:xtic(1) "
                         f"title {_quote(a)} lc rgb {_quote(COLORS[i % len(COLORS)])}")
        parts.append("0 with lines lc rgb 'black' notitle")
        return (f"set ylabel {_quote(label)}\n" + "plot " + ", \\\n  ".join(parts) + "\n")

    script = f"""
set terminal svg size {width},760 dynamic noenhanced font "sans,11" background rgb "white"
set output {_quote(path)}
set datafile separator "\\t"
set datafile missing "NaN"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border rgb "#333333"
set boxwidth 0.9
set yrange [{lo:.3f}:{hi:.3f}]
set ytics ({ytics})
set grid ytics lc rgb "#dddddd"
set key outside right top vertical
set xtics rotate by 30 right scale 0 nomirror
set multiplot layout 2,1 title {_quote(title)}
set title "wall time / glibc's (median; lower is better)"
{panel(2, "time, x glibc")}
set title "peak RSS / glibc's (median; lower is better)"
{panel(2 + n, "peak RSS, x glibc")}
unset multiplot
"""
    p = subprocess.run([gnuplot], input=script, text=True, capture_output=True)
    os.unlink(data)
    if p.returncode != 0:
        return "gnuplot failed: " + p.stderr.strip()[-500:]
    return ""
