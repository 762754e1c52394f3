/**
 * A uPlot chart that follows its container's width and takes new data without being rebuilt (streaming).
 * Drag across the plot zooms the x axis (kept while new data streams in); double-click resets to the full range.
 */
import { useEffect, useRef } from "react";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

interface Props {
  options: Omit<uPlot.Options, "width">; // rebuilt only when `optionsKey` changes
  optionsKey: string;
  data: uPlot.AlignedData;
}

export function UPlotChart({ options, optionsKey, data }: Props) {
  const host = useRef<HTMLDivElement>(null);
  const chart = useRef<uPlot | null>(null);
  const zoomed = useRef(false);
  const latest = useRef(data);
  latest.current = data;

  useEffect(() => {
    const el = host.current;
    if (!el) return;
    zoomed.current = false;
    const hooks: uPlot.Hooks.Arrays = {
      ...options.hooks,
      setSelect: [...(options.hooks?.setSelect ?? []), (u) => { if (u.select.width > 0) zoomed.current = true; }],
    };
    const plot = new uPlot({ ...options, hooks, width: Math.max(200, el.clientWidth) }, latest.current, el);
    chart.current = plot;
    const reset = () => {
      zoomed.current = false;
      plot.setData(latest.current, true);
    };
    el.addEventListener("dblclick", reset);
    const resize = new ResizeObserver(() => plot.setSize({ width: Math.max(200, el.clientWidth), height: options.height }));
    resize.observe(el);
    return () => {
      el.removeEventListener("dblclick", reset);
      resize.disconnect();
      plot.destroy();
      chart.current = null;
    };
  }, [optionsKey]); // options are identified by optionsKey

  useEffect(() => {
    chart.current?.setData(data, !zoomed.current); // a zoomed chart keeps its x range
  }, [data]);

  return <div ref={host} className="uplot-host" data-testid="chart" />;
}
