/** The submit form's experiment trackers and their place in a JobSpec (`telemetry.trackers`). */

export type TrackerType = "mlflow" | "wandb" | "tensorboard";
export interface TrackerChoice {
  type: TrackerType;
  mode?: "online" | "offline"; // wandb only
}

/** The trackers a spec names (e.g. the job a form is cloned from). */
export function trackersOf(spec: Record<string, unknown> | undefined): TrackerChoice[] {
  const telemetry = (spec?.telemetry ?? {}) as { trackers?: TrackerChoice[] };
  return (telemetry.trackers ?? []).map((t) => (t.type === "wandb" ? { type: t.type, mode: t.mode ?? "online" } : { type: t.type }));
}

/** `spec` with `telemetry.trackers` set to `choices` (other telemetry fields kept; untouched when there is nothing
 * to say: no choices and none before). */
export function withTrackers(spec: Record<string, unknown>, choices: TrackerChoice[]): Record<string, unknown> {
  const telemetry = (spec.telemetry ?? {}) as Record<string, unknown>;
  if (choices.length === 0 && telemetry.trackers === undefined) return spec;
  return { ...spec, telemetry: { ...telemetry, trackers: choices } };
}
