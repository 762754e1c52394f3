/** Response-length histogram with the long tail marked (the StreamRL skewness view). */
import { percentile } from "./stats";

export interface HistogramBin {
  lo: number; // inclusive
  hi: number; // exclusive, except the last bin which includes max
  count: number; // all lengths in the bin
  tailCount: number; // those >= the tail threshold (a bin may straddle it)
  tail: boolean; // tailCount > 0
}

export interface LengthHistogram {
  bins: HistogramBin[];
  p50: number;
  p90: number;
  p99: number;
  max: number;
  skew: number; // p99 / p50, the job's long-tail skew
  tailThreshold: number; // lengths >= this are the long tail (top `alpha` share)
  tailCount: number;
}

/** Bin edges of `count` equal-width integer-friendly bins covering [0, max]. */
export function binEdges(max: number, count: number): number[] {
  const width = Math.max(1, Math.ceil((max + 1) / count));
  return Array.from({ length: count + 1 }, (_, i) => i * width);
}

/** Smallest length among the longest `alpha` share (the dispatcher's definition of the long tail). */
export function tailStart(lengths: readonly number[], alpha: number): number {
  const sorted = [...lengths].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((1 - alpha) * sorted.length))];
}

/**
 * Histogram of response lengths. The long tail is the top `alpha` share (the dispatcher's alpha, default 0.2),
 * so the threshold is `tailStart`; each bin counts its tail lengths separately (a bin may straddle the threshold).
 */
export function lengthHistogram(lengths: readonly number[], binCount = 24, alpha = 0.2): LengthHistogram {
  if (binCount < 1) throw new Error(`binCount must be >= 1, got ${binCount}`);
  if (lengths.length === 0) {
    return { bins: [], p50: NaN, p90: NaN, p99: NaN, max: NaN, skew: NaN, tailThreshold: NaN, tailCount: 0 };
  }
  const max = Math.max(...lengths);
  const edges = binEdges(max, Math.min(binCount, max + 1));
  const width = edges[1] - edges[0];
  const tailThreshold = tailStart(lengths, alpha);
  const counts = new Array<number>(edges.length - 1).fill(0);
  const tailCounts = new Array<number>(edges.length - 1).fill(0);
  for (const length of lengths) {
    const bin = Math.min(counts.length - 1, Math.floor(length / width));
    counts[bin] += 1;
    if (length >= tailThreshold) tailCounts[bin] += 1;
  }
  const p50 = percentile(lengths, 50);
  const p99 = percentile(lengths, 99);
  return {
    bins: counts.map((count, i) => ({ lo: edges[i], hi: edges[i + 1], count, tailCount: tailCounts[i], tail: tailCounts[i] > 0 })),
    p50,
    p90: percentile(lengths, 90),
    p99,
    max,
    skew: p50 > 0 ? p99 / p50 : NaN,
    tailThreshold,
    tailCount: lengths.filter((length) => length >= tailThreshold).length,
  };
}

/** How many responses hit the `max_tokens` cut-off (length >= maxTokens: generation was stopped, not finished). */
export function truncated(
  lengths: readonly number[],
  maxTokens: number | null | undefined,
  flags?: readonly boolean[] | null,
): { count: number; share: number } {
  if (lengths.length === 0) return { count: 0, share: 0 };
  if (flags && flags.length === lengths.length) {
    const count = flags.filter(Boolean).length; // recorded per sample by the runtime (cut by max_tokens)
    return { count, share: count / lengths.length };
  }
  if (!maxTokens) return { count: 0, share: 0 };
  const count = lengths.filter((length) => length >= maxTokens).length;
  return { count, share: count / lengths.length };
}

/** Per bin of `bins`, how many of the flagged (truncated) lengths fall in it. */
export function truncatedPerBin(bins: readonly HistogramBin[], lengths: readonly number[], flags: readonly boolean[]): number[] {
  const counts = bins.map(() => 0);
  lengths.forEach((length, i) => {
    if (!flags[i] || bins.length === 0) return;
    const bin = bins.findIndex((b, k) => length >= b.lo && (length < b.hi || k === bins.length - 1));
    if (bin >= 0) counts[bin] += 1;
  });
  return counts;
}

/**
 * Lengths to draw for the newest iteration: its recorded `lengths` metric (a sample of every response's length,
 * when the runtime stores one) or else the lengths of the stored samples of that iteration.
 */
export function latestIterationLengths(
  iterations: readonly { iteration: number; metrics: Record<string, unknown> }[],
  samples: readonly { iteration: number; length: number; truncated?: boolean }[],
): { iteration: number | null; lengths: number[]; truncated: boolean[] | null; source: "metrics" | "samples" } {
  return recentIterationLengths(iterations, samples, 1);
}

/**
 * Every recorded response length (and truncation flag) of the newest `count` iterations, from the iteration records
 * (the runtime records each sample's length when it finishes, not only the few stored samples, which are the first
 * to finish and so the shortest). Falls back to the newest iteration's stored samples when nothing is recorded.
 * `iteration` is the newest one drawn; `truncated` is null unless every drawn iteration recorded its flags.
 */
export function recentIterationLengths(
  iterations: readonly { iteration: number; metrics: Record<string, unknown> }[],
  samples: readonly { iteration: number; length: number; truncated?: boolean }[],
  count: number,
): { iteration: number | null; lengths: number[]; truncated: boolean[] | null; source: "metrics" | "samples" } {
  const recordedRows = [...iterations]
    .filter((it) => Array.isArray(it.metrics.lengths) && (it.metrics.lengths as unknown[]).every((v) => typeof v === "number"))
    .sort((a, b) => b.iteration - a.iteration)
    .slice(0, Math.max(1, count));
  const newestAny = iterations.reduce<number | null>((m, it) => (m === null || it.iteration > m ? it.iteration : m), null);
  if (recordedRows.length > 0 && recordedRows[0].iteration === newestAny) {
    const lengths: number[] = [];
    const flags: boolean[] = [];
    let flagged = true;
    for (const row of [...recordedRows].reverse()) {
      const recorded = row.metrics.lengths as number[];
      const cut = row.metrics.lengths_truncated;
      lengths.push(...recorded);
      if (Array.isArray(cut) && cut.length === recorded.length) flags.push(...cut.map((f) => Boolean(f)));
      else flagged = false;
    }
    return { iteration: recordedRows[0].iteration, lengths, truncated: flagged ? flags : null, source: "metrics" };
  }
  const latest = samples.reduce<number | null>((m, s) => (m === null || s.iteration > m ? s.iteration : m), null);
  const chosen = samples.filter((s) => s.iteration === latest);
  const flags = chosen.every((s) => typeof s.truncated === "boolean") ? chosen.map((s) => Boolean(s.truncated)) : null;
  return { iteration: latest, lengths: chosen.map((s) => s.length), truncated: flags, source: "samples" };
}
