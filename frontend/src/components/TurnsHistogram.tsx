/**
 * Turns per episode next to tokens (multi-turn jobs' long tail): mean / p90 / max turns, episodes per turn count,
 * and the tokens those episodes took (mean and max), so a long episode reads as "many turns" or "long turns".
 */
import { useMemo } from "react";
import { summarizeTurns } from "../lib/turns";
import { BarChart } from "./BarChart";

const fmt = (value: number, digits = 0) => (Number.isFinite(value) ? value.toFixed(digits) : "–");

export function TurnsHistogram({ turns, lengths }: { turns: number[]; lengths: number[] }) {
  const summary = useMemo(() => summarizeTurns(turns, lengths), [turns, lengths]);
  const categories = useMemo(() => summary?.buckets.map((b) => String(b.turns)) ?? [], [summary]);
  const series = useMemo(
    () => [{ label: "episodes", color: "#7c3aed", values: summary?.buckets.map((b) => b.episodes) ?? [] }],
    [summary],
  );
  if (!summary) return <div className="empty-chart">no episodes yet</div>;
  return (
    <div data-testid="turns-histogram">
      <div className="stat-row" data-testid="turn-stats">
        <span>turns mean <b>{fmt(summary.mean, 2)}</b></span>
        <span>p90 <b>{fmt(summary.p90)}</b></span>
        <span>max <b>{fmt(summary.max)}</b></span>
        <span>episodes <b>{turns.length}</b></span>
      </div>
      <BarChart categories={categories} series={series} xLabel="policy turns per episode" yLabel="episodes" height={150} />
      <table className="table compact" data-testid="turn-tokens">
        <thead><tr><th>Turns</th><th>Episodes</th><th>Tokens (mean)</th><th>Tokens (max)</th></tr></thead>
        <tbody>
          {summary.buckets.filter((b) => b.episodes > 0).map((b) => (
            <tr key={b.turns}><td>{b.turns}</td><td>{b.episodes}</td><td>{fmt(b.tokensMean)}</td><td>{fmt(b.tokensMax)}</td></tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
