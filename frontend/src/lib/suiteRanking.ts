/** Rank runs by an evaluation suite (the compare page): each run's best checkpoint by the suite's mean. */

export interface ScoredCheckpoint {
  iteration: number;
  scores?: Record<string, Record<string, number>>;
}

export interface SuiteRank {
  jobId: number;
  iteration: number | null; // the run's checkpoint with the highest mean on the suite; null: none scored
  mean: number | null;
  passAt1: number | null;
  passAtK: number | null;
}

/** Every suite name any run's checkpoints were scored on, sorted. */
export function suiteNames(runs: ScoredCheckpoint[][]): string[] {
  return [...new Set(runs.flatMap((checkpoints) => checkpoints.flatMap((c) => Object.keys(c.scores ?? {}))))].sort();
}

/** Runs ordered by their best checkpoint's mean on `suite` (highest first; the newest checkpoint among equals), runs
 * without a score last in the order given. */
export function rankBySuite(jobIds: number[], runs: ScoredCheckpoint[][], suite: string): SuiteRank[] {
  const ranks = jobIds.map((jobId, index): SuiteRank => {
    let best: SuiteRank = { jobId, iteration: null, mean: null, passAt1: null, passAtK: null };
    for (const checkpoint of runs[index] ?? []) {
      const values = checkpoint.scores?.[suite];
      if (values?.mean === undefined) continue;
      const mean = values.mean;
      if (best.mean === null || mean > best.mean || (mean === best.mean && checkpoint.iteration > (best.iteration ?? -1))) {
        best = { jobId, iteration: checkpoint.iteration, mean, passAt1: values["pass@1"] ?? null, passAtK: values["pass@k"] ?? null };
      }
    }
    return best;
  });
  const scored = ranks.filter((r) => r.mean !== null).sort((a, b) => (b.mean ?? 0) - (a.mean ?? 0));
  return [...scored, ...ranks.filter((r) => r.mean === null)];
}
