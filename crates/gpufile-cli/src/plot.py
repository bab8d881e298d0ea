# `gpufile bench --plot IMAGE`: run as `python -c THIS IMAGE UNITS STATISTIC`, with bench's JSON
# results (docs/json.md) on stdin. One panel per swept dimension (threads, request size, task
# size): throughput against it, one line per setting that also varies. The line is the table's
# number, `throughput_gb_per_s` (bench's one statistic, named by STATISTIC), each point labelled
# with it as the table prints it; the slowest and fastest runs are a band with error bars.
# Settings that do not vary go in the title.
import json
import math
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("--plot needs matplotlib: pip install matplotlib")

rows = json.load(sys.stdin)
image, units, statistic = sys.argv[1], sys.argv[2], sys.argv[3]
scale, unit = ((1 << 30), "GiB/s") if units == "binary" else (1e9, "GB/s")
plt.rcParams["svg.fonttype"] = "none"  # an SVG keeps its labels as text

AXES = {"threads": "threads", "size": "request size", "task_size": "task size"}
SETTINGS = ["op", "memory", "cache", "compat_mode", "size", "threads", "task_size"]
NAMES = {"op": "", "memory": "", "cache": "", "compat_mode": "compat ", "size": "",
         "threads": "threads ", "task_size": "task "}


def human(n):
    for u in ["B", "KiB", "MiB", "GiB", "TiB"]:
        if n < 1024 or u == "TiB":
            return f"{n:g} {u}"
        n /= 1024


def show(key, value):
    text = human(value) if key in ("size", "task_size") else str(value)
    return NAMES[key] + text


def rates(r):
    return [r["size"] / s / scale for s in r["seconds_per_run"] if s > 0] or [0.0]


def reported(r):
    """The table's throughput of the row, in the plot's unit."""
    return r["throughput_gb_per_s"] * 1e9 / scale


def digits3(v):
    """As the table prints a rate: two decimals, or as many more as three significant digits
    need (gpufile_diag::units::rate)."""
    if not math.isfinite(v) or v <= 0 or v >= 1:
        return f"{v:.2f}"
    decimals = min(15, max(2, 2 - math.floor(math.log10(v))))
    return f"{v:.{decimals}f}"


def varies(key):
    return len({r[key] for r in rows}) > 1


swept = [k for k in AXES if varies(k)] or ["threads"]
fixed = [show(k, rows[0][k]) for k in SETTINGS if not varies(k) and k not in swept]
LABELS = {"op": "op", "memory": "memory", "cache": "cache", "compat_mode": "compat_mode",
          "size": "request size", "threads": "threads", "task_size": "task size"}
lines = max(len({tuple(r[k] for k in SETTINGS if k != x and varies(k)) for r in rows})
            for x in swept)
fig, axes = plt.subplots(1, len(swept), figsize=(max(8.5, 5.4 * len(swept)), 4.2 + 0.22 * lines),
                         squeeze=False)
for ax, x in zip(axes[0], swept):
    others = [k for k in SETTINGS if k != x and varies(k)]
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in others), []).append(r)
    for key, rs in sorted(groups.items()):
        rs.sort(key=lambda r: r[x])
        xs = [r[x] for r in rs]
        med = [reported(r) for r in rs]
        lo = [min(rates(r)) for r in rs]
        hi = [max(rates(r)) for r in rs]
        label = ", ".join(show(k, v) for k, v in zip(others, key)) or "gpufile"
        (line,) = ax.plot(xs, med, marker="o", label=label)
        if len(groups) <= 3:  # more bands and labels than that only muddy each other
            ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.18, linewidth=0)
            for x_, m in zip(xs, med):
                ax.annotate(digits3(m), (x_, m), textcoords="offset points", xytext=(0, 6),
                            ha="center", fontsize=7, color=line.get_color())
        ax.errorbar(xs, med, yerr=[[m - l for m, l in zip(med, lo)],
                                   [h - m for m, h in zip(med, hi)]],
                    fmt="none", ecolor=line.get_color(), capsize=3, linewidth=1)
    ticks = sorted({r[x] for r in rows})
    if len(ticks) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [human(t) if x != "threads" else str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel(AXES[x])
    ax.set_ylabel(f"throughput ({unit})")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.set_title(f"throughput vs {AXES[x]}", fontsize=11)
    if others:
        ax.legend(fontsize=8, title=", ".join(LABELS[k] for k in others), title_fontsize=8,
                  loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
fig.suptitle("gpufile bench" + (": " + ", ".join(fixed) if fixed else ""), fontsize=12)
fig.text(0.5, 0.005, f"line: {statistic}, as the table; bars (and bands): slowest to fastest run; "
         f"{unit} = {'2^30' if unit == 'GiB/s' else '10^9'} bytes per second",
         ha="center", fontsize=8, color="0.35")
fig.tight_layout(rect=(0, 0.02, 1, 1))
fig.savefig(image, dpi=130)
