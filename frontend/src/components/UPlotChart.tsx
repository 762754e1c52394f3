/**
 * A uPlot chart that follows its container's width and takes new data without being rebuilt (streaming).
 * Drag across the plot zooms the x axis (kept while new data streams in); double-click resets to the full range.
 * Charts given the same `syncKey` share their zoom: zooming or resetting one does the same to the others.
 */
import { useEffect, useRef } from "react";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { zoomGroup, type XRange, type ZoomMember } from "../lib/zoomSync";

interface Props {
  options: Omit<uPlot.Options, "width">; // rebuilt only when `optionsKey` changes
  optionsKey: string;
  data: uPlot.AlignedData;
  syncKey?: string;
}

export function UPlotChart({ options, optionsKey, data, syncKey }: Props) {
  const host = useRef<HTMLDivElement>(null);
  const chart = useRef<uPlot | null>(null);
  const zoomed = useRef(false);
  const latest = useRef(data);
  latest.current = data;

  useEffect(() => {
    const el = host.current;
    if (!el) return;
    zoomed.current = false;
    const group = syncKey ? zoomGroup(syncKey) : null;
    let plot: uPlot | null = null;
    const member: ZoomMember = {
      apply: (range: XRange | null) => {
        if (!plot) return;
        zoomed.current = range !== null;
        if (range) plot.setScale("x", { min: range[0], max: range[1] });
        else plot.setData(latest.current, true);
      },
    };
    const hooks: uPlot.Hooks.Arrays = {
      ...options.hooks,
      setSelect: [
        ...(options.hooks?.setSelect ?? []),
        (u) => {
          if (u.select.width <= 0) return;
          zoomed.current = true; // the drag's own setScale follows this hook
          const from = u.posToVal(u.select.left, "x");
          group?.set(member, [from, u.posToVal(u.select.left + u.select.width, "x")]);
        },
      ],
    };
    plot = new uPlot({ ...options, hooks, width: Math.max(200, el.clientWidth) }, latest.current, el);
    chart.current = plot;
    const leave = group?.join(member);
    const reset = () => {
      member.apply(null);
      group?.set(member, null);
    };
    el.addEventListener("dblclick", reset);
    const resize = new ResizeObserver(() => plot?.setSize({ width: Math.max(200, el.clientWidth), height: options.height }));
    resize.observe(el);
    return () => {
      leave?.();
      el.removeEventListener("dblclick", reset);
      resize.disconnect();
      plot?.destroy();
      plot = null;
      chart.current = null;
    };
  }, [optionsKey, syncKey]); // options are identified by optionsKey

  useEffect(() => {
    chart.current?.setData(data, !zoomed.current); // a zoomed chart keeps its x range
  }, [data]);

  return <div ref={host} className="uplot-host" data-testid="chart" />;
}
