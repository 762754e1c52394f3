/**
 * Server state through TanStack Query and the generated client: one place for query keys, refetch intervals and
 * invalidation. The runs table is one request (`GET /runs` carries health, eval reward and duration per job).
 */
import { QueryClient, useQueries, useQuery } from "@tanstack/react-query";
import { api, authHeaders, unwrap } from "../api/client";
import type { Iteration, Job, JobHealth, Run } from "../api/types";
import { runsQuery, type RunFilters } from "./runs";

const LIVE_MS = 5000;

export const queryClient = new QueryClient({
  defaultOptions: {
    queries: { refetchOnWindowFocus: true, retry: (count, err) => count < 2 && !isClientError(err), staleTime: 2000 },
  },
});

function isClientError(err: unknown): boolean {
  const status = (err as { status?: number } | null)?.status;
  return typeof status === "number" && status >= 400 && status < 500;
}

export const keys = {
  runs: (filters: RunFilters) => ["runs", filters.status, filters.tag, filters.q] as const,
  job: (id: number) => ["job", id] as const,
  health: (id: number) => ["job", id, "health"] as const,
  iterations: (id: number) => ["job", id, "iterations"] as const,
  checkpoints: (id: number) => ["job", id, "checkpoints"] as const,
  specYaml: (id: number) => ["job", id, "spec.yaml"] as const,
};

export function useRuns(filters: RunFilters) {
  return useQuery({
    queryKey: keys.runs(filters),
    queryFn: () => unwrap(api.GET("/api/v1/runs", { params: { query: runsQuery(filters) } })),
    refetchInterval: LIVE_MS,
    placeholderData: (previous) => previous, // typing a search keeps the table until the answer comes
  });
}

/** `status`: the job's status as the page knows it; a change (pause, resume, finish) refetches at once, so the
 * badge never shows health computed for the previous status. */
export function useJobHealth(jobId: number, status?: string) {
  return useQuery<JobHealth>({
    queryKey: [...keys.health(jobId), status ?? ""],
    queryFn: () => unwrap(api.GET("/api/v1/jobs/{job_id}/health", { params: { path: { job_id: jobId } } })),
    refetchInterval: LIVE_MS,
  });
}

export function useCheckpoints(jobId: number, iteration: number, status: string) {
  return useQuery({
    // the final checkpoint lands after the last iteration's metrics, hence status in the key
    queryKey: [...keys.checkpoints(jobId), iteration, status],
    queryFn: () => unwrap(api.GET("/api/v1/jobs/{job_id}/checkpoints", { params: { path: { job_id: jobId } } })),
  });
}

/** The spec as YAML (text, so read with fetch: openapi-fetch parses JSON bodies). */
export function useSpecYaml(jobId: number, enabled: boolean) {
  return useQuery({
    queryKey: keys.specYaml(jobId),
    enabled,
    queryFn: async () => {
      const answer = await fetch(`/api/v1/jobs/${jobId}/spec.yaml`, { headers: authHeaders() });
      if (!answer.ok) throw new Error(`spec.yaml: HTTP ${answer.status}`);
      return answer.text();
    },
  });
}

export function useJob(jobId: number | null) {
  return useQuery<Job>({
    queryKey: keys.job(jobId ?? -1),
    enabled: jobId !== null,
    queryFn: () => unwrap(api.GET("/api/v1/jobs/{job_id}", { params: { path: { job_id: jobId ?? -1 } } })),
  });
}

/** Each selected job and all its iterations (compare view: 2-8 jobs, two requests each). */
export function useCompared(ids: number[]) {
  const jobs = useQueries({
    queries: ids.map((id) => ({
      queryKey: keys.job(id),
      queryFn: () => unwrap(api.GET("/api/v1/jobs/{job_id}", { params: { path: { job_id: id } } })),
      refetchInterval: LIVE_MS,
    })),
  });
  const iterations = useQueries({
    queries: ids.map((id) => ({
      queryKey: keys.iterations(id),
      queryFn: async (): Promise<Iteration[]> =>
        (await unwrap(api.GET("/api/v1/jobs/{job_id}/iterations", { params: { path: { job_id: id }, query: { limit: 10_000 } } }))).data,
      refetchInterval: LIVE_MS,
    })),
  });
  return { jobs, iterations };
}

export type { Run };

/** A read with `reload()` for pages that change what they show (team, keys, models): the cache key names the
 * resource, so every page reading it shares one answer and a reload refreshes all of them. */
export function useApiQuery<T>(key: readonly unknown[], load: () => Promise<T>) {
  const query = useQuery({ queryKey: key, queryFn: load });
  return {
    data: query.data ?? null,
    error: query.error,
    reload: async () => {
      await queryClient.invalidateQueries({ queryKey: key });
    },
  };
}
