/** The chart toolbar of the job page and Compare: x axis, EMA smoothing, log scale, zero baseline (lib/chartView.ts). */
import type { ChartView, XAxis } from "../lib/chartView";

export function ChartControls({ view, onChange }: { view: ChartView; onChange: (view: ChartView) => void }) {
  return (
    <div className="chart-controls" data-testid="chart-controls">
      <select aria-label="x axis" value={view.x} onChange={(e) => onChange({ ...view, x: e.target.value as XAxis })}>
        <option value="iteration">x: iteration</option>
        <option value="samples">x: samples seen</option>
        <option value="time">x: wall time (s)</option>
      </select>
      <label className="toggle" title="exponential moving average of the past (TensorBoard's debiased EMA); 0 is off">
        smoothing
        <input type="range" aria-label="smoothing" min={0} max={0.99} step={0.01} value={view.smoothing}
          onChange={(e) => onChange({ ...view, smoothing: Number(e.target.value) })} />
        <output data-testid="smoothing-value">{view.smoothing.toFixed(2)}</output>
      </label>
      <label className="toggle" title="log10 y axis; values <= 0 are not drawn">
        <input type="checkbox" aria-label="log scale" checked={view.log} onChange={(e) => onChange({ ...view, log: e.target.checked })} /> log scale
      </label>
      <label className="toggle" title="the y axis starts at 0, so a flat line reads as flat">
        <input type="checkbox" aria-label="zero baseline" checked={view.zero} onChange={(e) => onChange({ ...view, zero: e.target.checked })} /> zero baseline
      </label>
    </div>
  );
}
