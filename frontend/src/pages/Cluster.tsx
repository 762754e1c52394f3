/**
 * The cluster: pools (workers, slots, busy, queued tasks), each worker by pool and node with its device sets, the jobs
 * holding its slots and CPU/memory (and GPU) over the last 30 minutes, and the team's pending instances with why they
 * wait, and the scheduler's queue by team and priority (components/QueueCard.tsx). `GET /cluster` and `GET /queue`,
 * refetched every 5 s.
 */
import { useQuery } from "@tanstack/react-query";
import { Link } from "react-router";
import { api, unwrap } from "../api/client";
import { LineChart } from "../components/LineChart";
import { QueueCard } from "../components/QueueCard";
import { Card, ErrorBanner, formatNumber } from "../components/ui";
import { resourceSeries, type Worker } from "../lib/cluster";

export function useCluster() {
  return useQuery({ queryKey: ["cluster"], queryFn: () => unwrap(api.GET("/api/v1/cluster")), refetchInterval: 5000 });
}

export function ClusterPage() {
  const { data, error } = useCluster();
  return (
    <div>
      <div className="page-head"><h2>Cluster</h2></div>
      <ErrorBanner error={error} />
      {data ? (
        <>
          <div className="table-scroll">
            <table className="table" data-testid="pools">
              <thead><tr><th>Pool</th><th>Workers</th><th>Slots</th><th>Busy</th><th>Queued tasks</th></tr></thead>
              <tbody>
                {data.pools.map((p) => (
                  <tr key={p.pool} data-pool={p.pool}>
                    <td>{p.pool}</td><td className="num">{p.workers}</td><td className="num">{p.slots}</td>
                    <td className="num">{p.busy}</td><td className="num">{p.queue_depth}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          <QueueCard />
          <Card title={`Pending instances (${data.pending.length})`}>
            {data.pending.length === 0 ? <p className="muted">None: every instance asked for has a worker slot.</p> : (
              <ul className="pending" data-testid="pending">
                {data.pending.map((p) => (
                  <li key={`${p.job_id}-${p.instance_id}`}>
                    <Link to={`/jobs/${p.job_id}`}>{p.job_name}</Link> {p.instance_id} <span className="muted">waiting {p.waited_s.toFixed(0)} s</span>
                    <div>{p.reason}</div>
                  </li>
                ))}
              </ul>
            )}
          </Card>
          {data.workers.length === 0 ? <p className="muted" data-testid="no-workers">No worker is registered: start one with <code>streamrl worker --pool generation</code>.</p> : null}
          <div className="grid">
            {data.workers.map((w) => <WorkerCard key={w.node} worker={w} />)}
          </div>
        </>
      ) : null}
    </div>
  );
}

function WorkerCard({ worker }: { worker: Worker }) {
  const newest = worker.samples.length ? worker.samples[worker.samples.length - 1] : null;
  const gpus = newest?.gpus ?? [];
  const cpu = [{ label: "CPU % (100 = one core)", color: "#2563eb", points: resourceSeries(worker, (s) => s.cpu_percent) },
    { label: "memory MB", color: "#059669", axis: "right" as const, points: resourceSeries(worker, (s) => s.memory_mb) }];
  const gpu = gpus.map((g, i) => ({ label: `GPU ${g.index} util %`, color: ["#ea580c", "#7c3aed", "#dc2626", "#64748b"][i % 4],
    points: resourceSeries(worker, (s) => s.gpus?.find((x) => x.index === g.index)?.util_percent) }));
  return (
    <Card title={<span>{worker.node} <span className="muted">{worker.pools.join(", ")}</span></span>} className="worker-card">
      <div data-testid={`worker-${worker.node}`}>
        <div className="muted">
          {worker.busy} of {worker.slots} slot(s) busy · {worker.device_kind ?? "no device pinning"}
          {worker.devices.length ? ` · device sets ${worker.devices.join(" ; ")}` : ""}
          {newest ? ` · CPU ${formatNumber(newest.cpu_percent, 0)} % · ${formatNumber(newest.memory_mb, 0)} MB` : ""}
        </div>
        <ul className="holders" data-testid="holders">
          {worker.holders.length === 0 ? <li className="muted">idle</li> : worker.holders.map((h, i) => (
            <li key={i}>
              {h.shared ? (
                h.own_jobs?.length
                  ? <span data-testid="own-shared">your team's shared LoRA process ({h.task}) serving {h.own_jobs.map((id, k) => <span key={id}>{k ? ", " : ""}<Link to={`/jobs/${id}`}>job {id}</Link></span>)}</span>
                  : <span className="muted">a shared LoRA process of other teams ({h.task})</span>
              ) : h.job_id === null ? <span className="muted">another team's {h.task}</span> : (
                <><Link to={`/jobs/${h.job_id}`}>{h.job_name}</Link> {h.instance_id ?? (h.rank != null ? `rank ${h.rank}` : "driver")}</>
              )}
            </li>
          ))}
        </ul>
        <LineChart series={cpu} height={140} xLabel="seconds before now" integerX={false} />
        {gpu.length ? <LineChart series={gpu} height={120} xLabel="seconds before now" integerX={false} /> : null}
      </div>
    </Card>
  );
}
