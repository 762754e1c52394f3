/**
 * Response-length histogram: regular bins vs the long tail (top alpha share), with p50 / p99 and their skew, and
 * the `max_tokens` cut-off (a multi-turn job's: `max_episode_tokens`) with the share of responses it truncated.
 */
import { useMemo } from "react";
import { lengthHistogram, truncated, truncatedPerBin } from "../lib/histogram";
import { BarChart } from "./BarChart";

/* Episodes: `truncatedFlags` mark an episode cut anywhere (max_episode_tokens, or any turn at max_tokens). */
const fmt = (value: number, digits = 0) => (Number.isFinite(value) ? value.toFixed(digits) : "–");

export function LengthHistogram({
  lengths,
  alpha = 0.2,
  maxTokens,
  truncatedFlags,
  episodes = false,
  turnsTruncated,
}: {
  lengths: number[];
  alpha?: number;
  maxTokens?: number;
  episodes?: boolean; // multi-turn: lengths are whole episodes, cut by environment.max_episode_tokens
  truncatedFlags?: boolean[] | null; // recorded per sample: cut by max_tokens (drawn apart)
  turnsTruncated?: number | null; // episodes: the share of policy turns cut at generation.max_tokens (metrics)
}) {
  const limitName = episodes ? "max_episode_tokens" : "max_tokens";
  const hist = useMemo(() => lengthHistogram(lengths, 24, alpha), [lengths, alpha]);
  const cut = useMemo(() => truncated(lengths, maxTokens, truncatedFlags), [lengths, maxTokens, truncatedFlags]);
  const categories = useMemo(() => hist.bins.map((b) => `${b.lo}`), [hist]);
  const series = useMemo(
    () => [
      // Drawn in order: all samples, then the tail share of each bin over it (orange from the baseline).
      { label: "all samples", color: "#60a5fa", values: hist.bins.map((b) => b.count) },
      { label: `long tail (top ${Math.round(alpha * 100)}%)`, color: "#f97316", values: hist.bins.map((b) => (b.tail ? b.tailCount : null)) },
      ...(truncatedFlags && truncatedFlags.length === lengths.length
        ? [{ label: `truncated (${limitName})`, color: "#dc2626", values: truncatedPerBin(hist.bins, lengths, truncatedFlags).map((c) => c || null) }]
        : []),
    ],
    [hist, alpha, lengths, truncatedFlags, limitName],
  );
  if (lengths.length === 0) return <div className="empty-chart">no samples yet</div>;
  return (
    <div>
      <div className="stat-row" data-testid="length-stats">
        <span>p50 <b>{fmt(hist.p50)}</b></span>
        <span>p90 <b>{fmt(hist.p90)}</b></span>
        <span>p99 <b>{fmt(hist.p99)}</b></span>
        <span>max <b>{fmt(hist.max)}</b></span>
        <span className={hist.skew >= 3 ? "warn" : ""}>p99/p50 skew <b>{fmt(hist.skew, 2)}×</b></span>
        <span>tail ≥ <b>{fmt(hist.tailThreshold)}</b> tokens ({hist.tailCount} of {lengths.length})</span>
        {maxTokens || truncatedFlags ? (
          <span className={cut.share >= 0.1 ? "warn" : ""} data-testid="truncated">
            {limitName} <b>{maxTokens ?? "?"}</b>{episodes ? " or a turn at max_tokens" : ""}: <b>{(cut.share * 100).toFixed(0)}%</b> truncated ({cut.count})
          </span>
        ) : null}
        {episodes && typeof turnsTruncated === "number" ? (
          <span className={turnsTruncated >= 0.1 ? "warn" : ""} data-testid="turns-truncated">
            turns cut at max_tokens <b>{(turnsTruncated * 100).toFixed(0)}%</b>
          </span>
        ) : null}
      </div>
      <BarChart categories={categories} series={series} xLabel={episodes ? "episode length (tokens)" : "response length (tokens)"} yLabel="samples" height={180} />
    </div>
  );
}
