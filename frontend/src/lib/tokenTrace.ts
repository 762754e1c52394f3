/**
 * The trajectory explorer's pure parts: per-token rows of a stored sample's record (GET /jobs/{id}/samples/{sid}/
 * tokens), the sample browser's filters, and the diff of two samples of one group (same iteration and prompt).
 */
import type { SampleRow, Schemas } from "../api/types";

export type SampleTokens = Schemas["SampleTokensPublic"];

export interface TokenRow {
  index: number;
  piece: string;
  behaviour: number;
  current: number;
  delta: number; // current - behaviour (the trainer's log ratio to the engine's)
  version: number;
  trained: boolean; // loss mask 1
}

/** The version of token i: the last mark at or before i (marks are [[token_index, version], ...]). */
export function tokenVersion(marks: number[][], index: number): number {
  let version = marks.length ? marks[0][1] : 0;
  for (const [start, v] of marks) if (start <= index) version = v;
  return version;
}

export function tokenRows(record: SampleTokens): TokenRow[] {
  return record.pieces.map((piece, index) => ({
    index,
    piece,
    behaviour: record.behaviour[index],
    current: record.current[index],
    delta: record.current[index] - record.behaviour[index],
    version: tokenVersion(record.versions, index),
    trained: record.loss_mask ? record.loss_mask[index] === 1 : true,
  }));
}

/** Versions behind the trainer when the sample was trained (iteration n trains at version n - 1). */
export function staleness(sample: SampleRow): number {
  return sample.iteration - 1 - sample.policy_version;
}

export interface SampleFilters {
  minReward: number | null;
  maxReward: number | null;
  maxLength: number | null;
  version: number | null;
  staleness: "any" | "on-policy" | "stale";
  minMismatch: number | null;
}

export const NO_FILTERS: SampleFilters = {
  minReward: null, maxReward: null, maxLength: null, version: null, staleness: "any", minMismatch: null,
};

export function matches(sample: SampleRow, f: SampleFilters): boolean {
  if (f.minReward !== null && !(sample.reward >= f.minReward)) return false;
  if (f.maxReward !== null && !(sample.reward <= f.maxReward)) return false;
  if (f.maxLength !== null && sample.length > f.maxLength) return false;
  if (f.version !== null && sample.policy_version !== f.version) return false;
  if (f.staleness === "on-policy" && staleness(sample) > 0) return false;
  if (f.staleness === "stale" && staleness(sample) <= 0) return false;
  if (f.minMismatch !== null && !((sample.mismatch ?? -1) >= f.minMismatch)) return false;
  return true;
}

/** The other stored samples of `sample`'s group: same iteration and prompt. */
export function groupMates(samples: SampleRow[], sample: SampleRow): SampleRow[] {
  return samples.filter((s) => s.sample_id !== sample.sample_id && s.iteration === sample.iteration && s.prompt === sample.prompt);
}

/** Index of the first token where two token sequences differ (the shorter length when one is a prefix). */
export function firstDivergence(a: string[], b: string[]): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return n;
}
