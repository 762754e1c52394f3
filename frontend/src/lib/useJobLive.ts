/**
 * Everything the job page shows, kept live: REST snapshot first, then the job's SSE stream appends
 * (`metrics`, `event`, `status`, `timeline`, `samples`). The stream reconnects by itself; on reconnect the
 * snapshot is reloaded so nothing published while disconnected is missed (appends are idempotent by key).
 */
import { useCallback, useEffect, useRef, useState } from "react";
import { api, ApiError, authHeaders, jobStreamUrl, unwrap } from "../api/client";
import type { Iteration, Job, JobEvent, SampleRow, TimelineSpan } from "../api/types";
import { mergeByKey, payloadItems } from "./live";
import { openEventStream } from "./sse";
import { pruneSpans, toSeconds } from "./timeline";

const MAX_ITERATIONS = 2000;
const MAX_EVENTS = 500;
const MAX_SAMPLES = 1000;
const SPAN_HISTORY_S = 600;
const TERMINAL = ["succeeded", "failed", "cancelled"];
const JOB_POLL_MS = 5000;
const FINAL_RELOAD_MS = 3000;

export interface JobLive {
  job: Job | null;
  iterations: Iteration[];
  events: JobEvent[];
  spans: TimelineSpan[];
  samples: SampleRow[];
  connected: boolean;
  error: unknown;
  setJob: (job: Job) => void;
  reloadJob: () => Promise<void>;
}

const spanKey = (s: TimelineSpan) => `${s.lane}|${s.kind}|${s.start}`;

export function useJobLive(jobId: number): JobLive {
  const [job, setJob] = useState<Job | null>(null);
  const [iterations, setIterations] = useState<Iteration[]>([]);
  const [events, setEvents] = useState<JobEvent[]>([]);
  const [spans, setSpans] = useState<TimelineSpan[]>([]);
  const [samples, setSamples] = useState<SampleRow[]>([]);
  const [connected, setConnected] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const alive = useRef(true);
  const lastEventId = useRef(0);

  const reloadJob = useCallback(async () => {
    const fresh = await unwrap(api.GET("/api/v1/jobs/{job_id}", { params: { path: { job_id: jobId } } }));
    if (alive.current) setJob(fresh);
  }, [jobId]);

  /** Events after the newest one held: every kind shows up within one poll even when nobody published it live. */
  const loadNewEvents = useCallback(async () => {
    const page = await unwrap(
      api.GET("/api/v1/jobs/{job_id}/events", { params: { path: { job_id: jobId }, query: { after_id: lastEventId.current, limit: MAX_EVENTS } } }),
    );
    if (alive.current && page.data.length) setEvents((cur) => mergeByKey(cur, page.data, (ev) => ev.id, MAX_EVENTS).sort((a, b) => a.id - b.id));
  }, [jobId]);

  const loadSnapshot = useCallback(async () => {
    const path = { job_id: jobId };
    const [its, evs, tl, sms] = await Promise.all([
      unwrap(api.GET("/api/v1/jobs/{job_id}/iterations", { params: { path, query: { limit: MAX_ITERATIONS } } })),
      unwrap(api.GET("/api/v1/jobs/{job_id}/events", { params: { path, query: { limit: MAX_EVENTS } } })),
      unwrap(api.GET("/api/v1/jobs/{job_id}/timeline", { params: { path } })),
      unwrap(api.GET("/api/v1/jobs/{job_id}/samples", { params: { path, query: { limit: 500 } } })),
    ]);
    if (!alive.current) return;
    setIterations((cur) => mergeByKey(cur, its.data, (it) => it.iteration, MAX_ITERATIONS).sort((a, b) => a.iteration - b.iteration));
    setEvents((cur) => mergeByKey(cur, evs.data, (ev) => ev.id, MAX_EVENTS).sort((a, b) => a.id - b.id));
    setSpans((cur) => mergeByKey(cur, tl.spans, spanKey, 20_000));
    setSamples((cur) => mergeByKey(cur, sms.data, (s) => s.sample_id, MAX_SAMPLES));
  }, [jobId]);

  useEffect(() => {
    alive.current = true;
    lastEventId.current = 0;
    setJob(null);
    setIterations([]);
    setEvents([]);
    setSpans([]);
    setSamples([]);
    Promise.all([reloadJob(), loadSnapshot()]).catch(setError);

    let finalReload: ReturnType<typeof setTimeout> | undefined;
    const handlers: Record<string, (data: unknown) => void> = {
      status: (data) => {
        // A full JobPublic (API) or a partial {id, status, error} (runtime): merge, then refetch the full row.
        const update = data as Partial<Job>;
        if (alive.current) setJob((cur) => (cur ? { ...cur, ...update } : "spec" in update ? (update as Job) : cur));
        if (!("spec" in update)) reloadJob().catch(setError);
        if (update.status && TERMINAL.includes(update.status)) {
          stream.close(); // the server ends the stream here
          // Workers flush their last spans around the final status: load what was recorded now and a moment later.
          loadSnapshot().catch(setError);
          finalReload = setTimeout(() => loadSnapshot().catch(setError), FINAL_RELOAD_MS);
        }
      },
      metrics: (data) => {
        const items = payloadItems<Iteration>(data);
        setIterations((cur) => mergeByKey(cur, items, (it) => it.iteration, MAX_ITERATIONS).sort((a, b) => a.iteration - b.iteration));
        reloadJob().catch(setError); // progress and latest_metrics
      },
      event: (data) => {
        const items = payloadItems<JobEvent>(data);
        setEvents((cur) => mergeByKey(cur, items, (ev) => ev.id, MAX_EVENTS).sort((a, b) => a.id - b.id));
        reloadJob().catch(setError); // scaling events change the job row
      },
      timeline: (data) => {
        const items = payloadItems<TimelineSpan>(data, "spans");
        setSpans((cur) => {
          const merged = mergeByKey(cur, items, spanKey, 20_000);
          const latest = merged.reduce((m, s) => Math.max(m, toSeconds(s.end ?? s.start)), 0);
          return pruneSpans(merged, latest - SPAN_HISTORY_S);
        });
      },
      samples: (data) => {
        const items = payloadItems<SampleRow>(data);
        setSamples((cur) => mergeByKey(cur, items, (s) => s.sample_id, MAX_SAMPLES));
      },
    };
    const stream = openEventStream(jobStreamUrl(jobId), authHeaders, {
      onOpen: () => {
        setConnected(true);
        loadSnapshot().catch(setError); // subscribed now: catch up on anything published before (idempotent merge)
      },
      onDisconnect: () => setConnected(false),
      onRefused: (status, body) => setError(new ApiError(status, body)),
      onMessage: (message) => handlers[message.event]?.(JSON.parse(message.data)),
    });
    // Transitions made by the controller (admission, instance counts) are not all published live: poll the row and
    // the events after the newest one held too.
    const poll = setInterval(() => {
      if (document.hidden) return;
      reloadJob().catch(setError);
      loadNewEvents().catch(setError);
    }, JOB_POLL_MS);
    return () => {
      alive.current = false;
      clearInterval(poll);
      clearTimeout(finalReload);
      stream.close();
    };
  }, [jobId, reloadJob, loadSnapshot, loadNewEvents]);

  useEffect(() => {
    lastEventId.current = events.reduce((m, ev) => Math.max(m, ev.id), 0);
  }, [events]);

  return { job, iterations, events, spans, samples, connected, error, setJob, reloadJob };
}
