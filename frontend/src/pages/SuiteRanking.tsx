/** The compare page's ranking of the runs by an evaluation suite: each run's best checkpoint on the chosen suite
 * (`?suite=NAME`, default the first scored), with mean, pass@1 and pass@k (docs/dashboard.md). */
import { useQueries } from "@tanstack/react-query";
import { Link, useSearchParams } from "react-router";
import { api, unwrap } from "../api/client";
import type { Job } from "../api/types";
import { Card, formatNumber } from "../components/ui";
import { keys } from "../lib/queries";
import { rankBySuite, suiteNames, type ScoredCheckpoint } from "../lib/suiteRanking";

export function SuiteRanking({ ids, jobs }: { ids: number[]; jobs: Job[] }) {
  const [params, setParams] = useSearchParams();
  const checkpoints = useQueries({
    queries: ids.map((id) => ({
      queryKey: [...keys.checkpoints(id), "compare"],
      queryFn: () => unwrap(api.GET("/api/v1/jobs/{job_id}/checkpoints", { params: { path: { job_id: id } } })),
    })),
  });
  const runs: ScoredCheckpoint[][] = checkpoints.map((q) => q.data?.data ?? []);
  const suites = suiteNames(runs);
  if (suites.length === 0) return null;
  const suite = suites.includes(params.get("suite") ?? "") ? (params.get("suite") as string) : suites[0];
  const choose = (name: string) => {
    const next = new URLSearchParams(params);
    next.set("suite", name);
    setParams(next, { replace: true });
  };
  return (
    <Card title="Ranked by evaluation suite" actions={
      <select aria-label="rank by suite" value={suite} onChange={(e) => choose(e.target.value)}>
        {suites.map((name) => <option key={name} value={name}>{name}</option>)}
      </select>}>
      <table className="table compact" data-testid="suite-ranking">
        <thead><tr><th>#</th><th>Run</th><th>Best checkpoint</th><th>mean</th><th>pass@1</th><th>pass@k</th></tr></thead>
        <tbody>
          {rankBySuite(ids, runs, suite).map((rank, i) => (
            <tr key={rank.jobId}>
              <td>{rank.mean === null ? "–" : i + 1}</td>
              <td><Link to={`/jobs/${rank.jobId}`}>{jobs.find((j) => j.id === rank.jobId)?.name ?? `#${rank.jobId}`}</Link></td>
              <td>{rank.iteration === null ? "not scored" : `iteration ${rank.iteration}`}</td>
              <td>{formatNumber(rank.mean, 4)}</td><td>{formatNumber(rank.passAt1, 4)}</td><td>{formatNumber(rank.passAtK, 4)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </Card>
  );
}
