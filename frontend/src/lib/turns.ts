/** Turns per episode next to tokens (the long-tail views of multi-turn jobs): an iteration's recorded `turns` list
 * sits beside its `lengths` (workers/runtime/recorder.py); without it, the stored samples' episodes give both. */
import { percentile } from "./stats";

export interface TurnsAndTokens {
  iteration: number | null;
  turns: number[];
  lengths: number[]; // tokens of the same episodes, index by index
  source: "metrics" | "samples";
}

export interface TurnBucket {
  turns: number;
  episodes: number;
  tokensMean: number;
  tokensMax: number;
}

export interface TurnSummary {
  mean: number;
  p90: number;
  max: number;
  buckets: TurnBucket[]; // every turn count from 1 (or the smallest) to the largest, empty ones included
}

const numbers = (v: unknown): number[] | null =>
  Array.isArray(v) && v.every((x) => typeof x === "number") ? (v as number[]) : null;

/** The newest iteration's (turns, lengths) from its metrics, else from the stored samples of that iteration that
 * carry an episode; empty lists when the job has no episodes. */
export function latestIterationTurns(
  iterations: readonly { iteration: number; metrics: Record<string, unknown> }[],
  samples: readonly { iteration: number; length: number; episode?: Record<string, unknown> | null }[],
): TurnsAndTokens {
  const newest = iterations.reduce<(typeof iterations)[number] | null>((m, it) => (m && m.iteration >= it.iteration ? m : it), null);
  const turns = numbers(newest?.metrics.turns);
  const lengths = numbers(newest?.metrics.lengths);
  if (newest && turns && lengths && turns.length === lengths.length && turns.length > 0) {
    return { iteration: newest.iteration, turns, lengths, source: "metrics" };
  }
  const episodes = samples.filter((s) => s.episode && typeof s.episode.turns === "number");
  const latest = episodes.reduce<number | null>((m, s) => (m === null || s.iteration > m ? s.iteration : m), null);
  const chosen = episodes.filter((s) => s.iteration === latest);
  return { iteration: latest, turns: chosen.map((s) => s.episode?.turns as number), lengths: chosen.map((s) => s.length), source: "samples" };
}

/** Every loaded sample's (turns, length), for the "all loaded samples" scope. */
export function sampleTurns(samples: readonly { length: number; episode?: Record<string, unknown> | null }[]): { turns: number[]; lengths: number[] } {
  const episodes = samples.filter((s) => s.episode && typeof s.episode.turns === "number");
  return { turns: episodes.map((s) => s.episode?.turns as number), lengths: episodes.map((s) => s.length) };
}

/** Mean / p90 / max turns and, per turn count, how many episodes took it and their tokens (mean, max). */
export function summarizeTurns(turns: readonly number[], lengths: readonly number[]): TurnSummary | null {
  if (turns.length === 0) return null;
  if (lengths.length !== turns.length) throw new Error(`turns (${turns.length}) and lengths (${lengths.length}) differ`);
  const max = Math.max(...turns);
  const low = Math.max(0, Math.min(1, Math.min(...turns)));
  const buckets: TurnBucket[] = [];
  for (let t = low; t <= max; t++) {
    const tokens = lengths.filter((_, i) => turns[i] === t);
    buckets.push({
      turns: t,
      episodes: tokens.length,
      tokensMean: tokens.length ? tokens.reduce((a, b) => a + b, 0) / tokens.length : NaN,
      tokensMax: tokens.length ? Math.max(...tokens) : NaN,
    });
  }
  return { mean: turns.reduce((a, b) => a + b, 0) / turns.length, p90: percentile(turns, 90), max, buckets };
}
