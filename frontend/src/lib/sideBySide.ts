/** Columns of the same-prompt view: several runs -> one column per run (its iterations stacked, oldest first);
 * one run -> one column per iteration, so its checkpoints sit side by side. Pure, unit tested. */
import type { IterationSamples, PromptSamples } from "../api/types";

export interface SideColumn {
  key: string;
  jobId: number;
  title: string;
  groups: IterationSamples[];
}

export function sideColumns(result: PromptSamples): SideColumn[] {
  if (result.runs.length === 1) {
    const run = result.runs[0];
    return run.iterations.map((group) => ({ key: `${run.job_id}:${group.iteration}`, jobId: run.job_id, title: `${run.name} · iteration ${group.iteration}`, groups: [group] }));
  }
  return result.runs.map((run) => ({ key: String(run.job_id), jobId: run.job_id, title: run.name, groups: run.iterations }));
}

/** `/samples?ids=3,7&prompt=...` for the router (the prompt URL-encoded). */
export function samplesRoute(ids: readonly number[], prompt?: string): string {
  const params = new URLSearchParams({ ids: ids.join(",") });
  if (prompt) params.set("prompt", prompt);
  return `/samples?${params.toString()}`;
}
