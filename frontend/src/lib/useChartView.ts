/** The page's chart view (lib/chartView.ts) in React state, mirrored into the URL: the controls answer at once (a
 * router navigation is a deferred transition, which would let a controlled checkbox flip back first) and the URL stays
 * shareable. */
import { useState } from "react";
import { useSearchParams } from "react-router";
import { viewFromParams, viewToParams, type ChartView } from "./chartView";

export function useChartView(): [ChartView, (view: ChartView) => void] {
  const [params, setParams] = useSearchParams();
  const [view, setView] = useState<ChartView>(() => viewFromParams(params));
  const change = (next: ChartView) => {
    setView(next);
    setParams((current) => viewToParams(next, current), { replace: true });
  };
  return [view, change];
}
