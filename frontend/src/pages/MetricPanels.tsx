/**
 * The job page's metric picker: a chart of any metric the iteration records hold (entropy, clip fraction, grad norm,
 * losses, mismatch, eval reward, ...), one panel per chosen metric, drawn with the page's chart view. The chosen
 * metrics are the URL's `m` (shareable); by default the optimizer's signals the fixed panels do not draw.
 */
import { useMemo } from "react";
import { useSearchParams } from "react-router";
import type { LineChartProps } from "../components/LineChart";
import { LineChart } from "../components/LineChart";
import { Card } from "../components/ui";
import { metricPoints, minSpanOf, recordedMetrics, type RowLike, type XAxis } from "../lib/chartView";
import { PREFERRED_METRICS } from "../lib/compare";

const DEFAULT_METRICS = ["entropy", "clip_frac", "grad_norm"];
const COLORS = ["#7c3aed", "#0891b2", "#be185d", "#65a30d", "#ea580c", "#2563eb"];

interface Props {
  rows: readonly RowLike[];
  x: XAxis;
  chart: Omit<LineChartProps, "series">; // the page's shared chart props (view, x label, zoom group, markers)
}

export function MetricPanels({ rows, x, chart }: Props) {
  const [params, setParams] = useSearchParams();
  const metrics = useMemo(() => recordedMetrics(rows, PREFERRED_METRICS), [rows]);
  const chosen = params.has("m") ? (params.get("m") ?? "").split(",").filter(Boolean) : DEFAULT_METRICS.filter((m) => metrics.includes(m));
  const choose = (next: string[]) =>
    setParams((current) => {
      const updated = new URLSearchParams(current);
      updated.set("m", next.join(","));
      return updated;
    }, { replace: true });
  return (
    <Card
      title="Metrics"
      className="wide"
      actions={
        <select aria-label="chart a metric" value="" onChange={(e) => e.target.value && choose([...chosen, e.target.value])}>
          <option value="">+ chart a metric ({metrics.length} recorded)…</option>
          {metrics.filter((m) => !chosen.includes(m)).map((m) => <option key={m} value={m}>{m}</option>)}
        </select>
      }
    >
      {chosen.length === 0 ? <p className="muted">Pick any recorded metric to chart it.</p> : null}
      <div className="metric-panels">
        {chosen.map((metric, i) => (
          <div key={metric} className="metric-panel" data-testid={`metric-panel-${metric}`}>
            <div className="metric-panel-head">
              <b>{metric}</b>
              <button className="link" aria-label={`remove ${metric}`} onClick={() => choose(chosen.filter((m) => m !== metric))}>✕</button>
            </div>
            <LineChart {...chart} minSpan={minSpanOf(metric)} series={[{ label: metric, color: COLORS[i % COLORS.length], points: metricPoints(rows, metric, x) }]} />
          </div>
        ))}
      </div>
    </Card>
  );
}

