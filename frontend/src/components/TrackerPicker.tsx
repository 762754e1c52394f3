/** The submit form's experiment trackers: MLflow, W&B (online or offline), TensorBoard (telemetry.trackers). */
import type { TrackerChoice, TrackerType } from "../lib/trackers";
import { Field } from "./ui";

const LABELS: Record<TrackerType, string> = { mlflow: "MLflow", wandb: "Weights & Biases", tensorboard: "TensorBoard" };

export function TrackerPicker({ value, onChange, error }: { value: TrackerChoice[]; onChange: (next: TrackerChoice[]) => void; error?: string }) {
  const chosen = (type: TrackerType) => value.find((t) => t.type === type);
  const toggle = (type: TrackerType) =>
    onChange(chosen(type) ? value.filter((t) => t.type !== type) : [...value, type === "wandb" ? { type, mode: "online" } : { type }]);
  const wandb = chosen("wandb");
  return (
    <Field label="Experiment trackers" error={error} hint="the team's connections (Team page) are used; TensorBoard files land in the job's artifacts">
      <span className="row" data-testid="tracker-picker">
        {(Object.keys(LABELS) as TrackerType[]).map((type) => (
          <label key={type} className="check">
            <input type="checkbox" name={`tracker-${type}`} checked={chosen(type) !== undefined} onChange={() => toggle(type)} /> {LABELS[type]}
          </label>
        ))}
        {wandb ? (
          <select name="wandb-mode" aria-label="W&B mode" value={wandb.mode ?? "online"}
            onChange={(e) => onChange(value.map((t) => (t.type === "wandb" ? { ...t, mode: e.target.value as "online" | "offline" } : t)))}>
            <option value="online">W&B online</option>
            <option value="offline">W&B offline</option>
          </select>
        ) : null}
      </span>
    </Field>
  );
}
