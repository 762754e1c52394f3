/** A uPlot chart that follows its container's width and takes new data without being rebuilt (streaming). */
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
  const latest = useRef(data);
  latest.current = data;

  useEffect(() => {
    const el = host.current;
    if (!el) return;
    const plot = new uPlot({ ...options, width: Math.max(200, el.clientWidth) }, latest.current, el);
    chart.current = plot;
    const resize = new ResizeObserver(() => plot.setSize({ width: Math.max(200, el.clientWidth), height: options.height }));
    resize.observe(el);
    return () => {
      resize.disconnect();
      plot.destroy();
      chart.current = null;
    };
  }, [optionsKey]); // options are identified by optionsKey

  useEffect(() => {
    chart.current?.setData(data);
  }, [data]);

  return <div ref={host} className="uplot-host" />;
}
