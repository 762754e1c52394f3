/**
 * Categorical bar chart (uPlot bars). Series are drawn centred on each category in order, each over the previous,
 * e.g. a histogram's totals with its long-tail share on top.
 */
import { useMemo } from "react";
import uPlot from "uplot";
import { UPlotChart } from "./UPlotChart";

export interface BarSeries {
  label: string;
  color: string;
  values: (number | null)[]; // one per category
}

interface Props {
  categories: string[];
  series: BarSeries[];
  height?: number;
  xLabel?: string;
  yLabel?: string;
}

export function BarChart({ categories, series, height = 200, xLabel = "", yLabel = "" }: Props) {
  const key = `${categories.join(",")}|${series.map((s) => s.label).join(",")}|${height}`;
  const data = useMemo<uPlot.AlignedData>(
    () => [categories.map((_, i) => i), ...series.map((s) => s.values)],
    [categories, series],
  );
  const options = useMemo<Omit<uPlot.Options, "width">>(() => {
    const step = Math.max(1, Math.ceil(categories.length / 12)); // at most ~12 tick labels
    return {
      height,
      scales: {
        x: { time: false, range: [-0.5, categories.length - 0.5] },
        y: { range: (_u: uPlot, _min: number, max: number): uPlot.Range.MinMax => [0, max > 0 ? max * 1.1 : 1] },
      },
      cursor: { drag: { x: false, y: false } },
      legend: { live: false },
      axes: [
        {
          label: xLabel,
          stroke: "#64748b",
          grid: { show: false },
          splits: () => categories.map((_, i) => i).filter((i) => i % step === 0),
          values: (_u: uPlot, splits: number[]) => splits.map((i) => categories[i] ?? ""),
        },
        { label: yLabel, stroke: "#64748b", grid: { stroke: "#eef2f7" }, size: 56 },
      ],
      series: [
        { label: xLabel || "category", value: (_u: uPlot, i: number | null) => (i == null ? "" : (categories[i] ?? "")) },
        ...series.map((s) => ({
          label: s.label,
          stroke: s.color,
          fill: s.color,
          paths: uPlot.paths.bars!({ size: [0.8, 64] }),
          points: { show: false },
        })),
      ],
    };
  }, [key]); // rebuilt only when categories/series change; new values go through setData
  return <UPlotChart options={options} optionsKey={key} data={data} />;
}
