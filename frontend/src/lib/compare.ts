/** Compare view data: one series per run for a metric, on a shared x (iteration, or wall seconds since the run's
 * first iteration), and the palette that keeps each run's colour the same on every panel. */
import { metricPoints, recordedMetrics, type XAxis } from "./chartView";
import type { SeriesPoint } from "./sparkline";

export type XMode = XAxis;
export const RUN_COLORS = ["#2563eb", "#dc2626", "#059669", "#7c3aed", "#ea580c", "#0891b2", "#be185d", "#65a30d"];

export interface IterationLike {
  iteration: number;
  created_at: string;
  metrics: Record<string, unknown>;
}

/** The metric as points on x (iteration, samples seen, or wall seconds since the run's first iteration row). */
export function runSeries(rows: readonly IterationLike[], metric: string, x: XMode): SeriesPoint[] {
  return metricPoints(rows, metric, x);
}

/** Metrics worth a panel: the preferred ones first, then any other numeric key some run recorded. */
export const PREFERRED_METRICS = [
  "reward_mean", "eval_reward", "samples_per_s", "iteration_seconds", "len_p50", "len_p99", "kl", "entropy",
  "clip_frac", "grad_norm", "mismatch_kl", "staleness_mean", "instances", "reward_errors",
];

export function availableMetrics(runs: readonly (readonly IterationLike[])[]): string[] {
  return recordedMetrics(runs.flat(), PREFERRED_METRICS);
}

export interface RunSummary {
  iterations: number;
  finalReward: number | null;
  bestReward: number | null;
  meanSamplesPerS: number | null;
  meanIterationS: number | null;
  firstIterationAtReward: number | null; // first iteration whose reward reached `target` (null: never)
}

const values = (rows: readonly IterationLike[], key: string) =>
  rows.map((r) => r.metrics[key]).filter((v): v is number => typeof v === "number" && Number.isFinite(v));
const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);

/** Per-run figures for the compare table; `target` is the reward the "reached at" column looks for. */
export function runSummary(rows: readonly IterationLike[], target: number | null): RunSummary {
  const sorted = [...rows].sort((a, b) => a.iteration - b.iteration);
  const rewards = values(sorted, "reward_mean");
  const reached = target === null ? undefined : sorted.find((r) => typeof r.metrics.reward_mean === "number" && (r.metrics.reward_mean as number) >= target);
  return {
    iterations: sorted.length,
    finalReward: rewards.length ? rewards[rewards.length - 1] : null,
    bestReward: rewards.length ? Math.max(...rewards) : null,
    meanSamplesPerS: mean(values(sorted, "samples_per_s")),
    meanIterationS: mean(values(sorted, "iteration_seconds")),
    firstIterationAtReward: reached ? reached.iteration : null,
  };
}

/** The reward every compared run can be measured against: the lowest of their best rewards (null if any has none). */
export function commonTarget(summaries: readonly { bestReward: number | null }[]): number | null {
  const bests = summaries.map((s) => s.bestReward);
  return bests.length && bests.every((b) => b !== null) ? Math.min(...(bests as number[])) : null;
}
