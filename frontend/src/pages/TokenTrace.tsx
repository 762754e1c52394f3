/**
 * The trajectory explorer's per-token view of one stored sample: each response token with the behaviour logprob the
 * engine recorded, the trainer's logprob at the step that trained it ("current"), their difference, the version
 * that sampled it and whether the loss trained it; the sample's advantage, mismatch and reward components above.
 * With a second sample of the same group (same iteration and prompt) chosen, the two are shown token by token from
 * where they diverge.
 */
import { useQuery } from "@tanstack/react-query";
import { useState } from "react";
import { api, unwrap } from "../api/client";
import type { SampleRow } from "../api/types";
import { ErrorBanner, formatNumber } from "../components/ui";
import { firstDivergence, groupMates, tokenRows, type SampleTokens } from "../lib/tokenTrace";

const LARGE_DELTA = Math.log(2); // |Δlogp| above log 2: the two probabilities differ by more than 2x

function useTokens(jobId: number, sampleId: string | null) {
  return useQuery({
    queryKey: ["job", jobId, "sample-tokens", sampleId],
    enabled: sampleId !== null,
    queryFn: () => unwrap(api.GET("/api/v1/jobs/{job_id}/samples/{sample_id}/tokens",
      { params: { path: { job_id: jobId, sample_id: sampleId ?? "" } } })),
    retry: false,
  });
}

export function TokenTrace({ jobId, sample, samples }: { jobId: number; sample: SampleRow; samples: SampleRow[] }) {
  const record = useTokens(jobId, sample.sample_id);
  const mates = groupMates(samples, sample);
  const [other, setOther] = useState<string | null>(null);
  const otherRecord = useTokens(jobId, other);
  if (record.isPending) return <p className="muted">loading tokens…</p>;
  if (record.error) return <p className="muted" data-testid="token-trace-missing">no per-token record for this sample</p>;
  const data = record.data;
  return (
    <div className="token-trace" data-testid="token-trace">
      <div className="stat-row">
        <span>trained at version <b>{data.trained_version}</b></span>
        <span>advantage <b data-testid="trace-advantage">{formatNumber(data.advantage, 3)}</b></span>
        <span>mismatch (k3) <b>{data.mismatch === null || data.mismatch === undefined ? "–" : data.mismatch.toExponential(2)}</b></span>
        {mates.length ? (
          <label>diff with{" "}
            <select aria-label="diff with sample" value={other ?? ""} onChange={(e) => setOther(e.target.value || null)}>
              <option value="">(another sample of the group)</option>
              {mates.map((m) => <option key={m.sample_id} value={m.sample_id}>{m.sample_id} (reward {formatNumber(m.reward, 2)})</option>)}
            </select>
          </label>
        ) : null}
      </div>
      {other && otherRecord.data ? <SampleDiff a={data} b={otherRecord.data} /> : null}
      {other && otherRecord.error ? <ErrorBanner error={otherRecord.error} /> : null}
      <table className="table compact mono">
        <thead><tr><th>#</th><th>Token</th><th>Behaviour logp</th><th>Current logp</th><th>Δ</th><th>Version</th><th>Loss</th></tr></thead>
        <tbody>
          {tokenRows(data).map((row) => (
            <tr key={row.index} data-testid="token-row" className={row.trained ? undefined : "muted"}>
              <td>{row.index}</td>
              <td><code>{JSON.stringify(row.piece)}</code></td>
              <td>{row.behaviour.toFixed(4)}</td>
              <td>{row.current.toFixed(4)}</td>
              <td className={Math.abs(row.delta) > LARGE_DELTA ? "bad" : undefined}>{row.delta.toFixed(4)}</td>
              <td>{row.version}</td>
              <td>{row.trained ? "trained" : "context"}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function SampleDiff({ a, b }: { a: SampleTokens; b: SampleTokens }) {
  const split = firstDivergence(a.pieces, b.pieces);
  const line = (record: SampleTokens) => (
    <div className="mono">
      <span>{record.pieces.slice(0, split).join("")}</span>
      <mark>{record.pieces.slice(split).join("")}</mark>
      <span className="muted"> — reward {formatNumber(record.reward, 3)}, advantage {formatNumber(record.advantage, 3)}</span>
    </div>
  );
  return (
    <div className="sample-diff" data-testid="sample-diff">
      <p className="muted">the two samples agree on their first {split} token{split === 1 ? "" : "s"}, then diverge (marked)</p>
      {line(a)}
      {line(b)}
    </div>
  );
}
