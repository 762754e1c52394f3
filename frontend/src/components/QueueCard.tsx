/**
 * The scheduler's queue on the cluster page: waiting items grouped by team and priority (slots asked for), then each
 * item in order with what it waits for, its ETA and why. Another team's items carry no job id or name
 * (`GET /queue`, refetched every 5 s).
 */
import { useQuery } from "@tanstack/react-query";
import { Link } from "react-router";
import { api, unwrap } from "../api/client";
import { Card } from "./ui";

export function useQueue() {
  return useQuery({ queryKey: ["queue"], queryFn: () => unwrap(api.GET("/api/v1/queue")), refetchInterval: 5000 });
}

function eta(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined) return "–";
  return seconds >= 90 ? `${(seconds / 60).toFixed(0)} min` : `${seconds.toFixed(0)} s`;
}

export function QueueCard() {
  const { data } = useQueue();
  const items = data?.items ?? [];
  return (
    <Card title={`Queue (${items.length} waiting)`}>
      {items.length === 0 ? <p className="muted" data-testid="queue-empty">Nothing waits: every submitted job and session holds its slots.</p> : (
        <>
          <table className="table" data-testid="queue-groups">
            <thead><tr><th>Team</th><th>Priority</th><th>Waiting</th><th>Training slots</th><th>Generation slots</th></tr></thead>
            <tbody>
              {data!.groups.map((g) => (
                <tr key={`${g.team}-${g.priority}`} data-team={g.own ? "own" : "other"} data-priority={g.priority}>
                  <td>{g.team}</td><td>{g.priority}</td><td className="num">{g.waiting}</td>
                  <td className="num">{g.training_slots}</td><td className="num">{g.generation_slots}</td>
                </tr>
              ))}
            </tbody>
          </table>
          <table className="table" data-testid="queue-items">
            <thead><tr><th>#</th><th>Priority</th><th>Team</th><th>Job</th><th>Waiting for</th><th>ETA</th><th>Why</th></tr></thead>
            <tbody>
              {items.map((item) => (
                <tr key={`${item.position}-${item.job_id ?? item.team}`} data-position={item.position}>
                  <td className="num">{item.position}</td><td>{item.priority}</td><td>{item.team}</td>
                  <td>{item.own && item.job_id !== null ? <Link to={`/jobs/${item.job_id}`}>{item.job_name}</Link> : <span className="muted">–</span>}</td>
                  <td>{item.waiting_for.replaceAll("_", " ")}</td><td className="num">{eta(item.eta_s)}</td>
                  <td>{item.reason}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
    </Card>
  );
}
