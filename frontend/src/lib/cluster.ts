/** Cluster page helpers: per-worker resource series and the submit form's capacity warning. Pure, unit tested. */
import type { components } from "../api/schema";
import type { SeriesPoint } from "./sparkline";

export type Cluster = components["schemas"]["ClusterPublic"];
export type Worker = components["schemas"]["WorkerPublic"];

/** A worker's samples as chart points: x = seconds before the newest sample (negative), y = the chosen figure. */
export function resourceSeries(worker: Pick<Worker, "samples">, pick: (s: Worker["samples"][number]) => number | null | undefined): SeriesPoint[] {
  const samples = worker.samples ?? [];
  const last = samples.length ? samples[samples.length - 1].at : 0;
  return samples
    .map((s) => ({ x: Math.round(s.at - last), y: pick(s) }))
    .filter((p): p is SeriesPoint => typeof p.y === "number" && Number.isFinite(p.y));
}

/** A warning when the job asks for more generation instances than the generation pool has slots (null: fits, or the
 * cluster is unknown). Instances beyond the slots stay pending until workers are added. */
export function capacityWarning(instances: number | null, cluster: Pick<Cluster, "pools"> | null | undefined): string | null {
  if (!cluster || instances === null || !Number.isFinite(instances)) return null;
  const pool = cluster.pools.find((p) => p.pool === "generation");
  if (!pool) return null;
  if (pool.slots === 0) return `No generation worker is registered: the job's ${instances} instance(s) stay pending until one starts (streamrl worker --pool generation).`;
  if (instances > pool.slots) return `The generation pool has ${pool.slots} slot(s) (${pool.slots - pool.busy} free); ${instances - pool.slots} of the ${instances} instances would stay pending until workers are added.`;
  return null;
}
