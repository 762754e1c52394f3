import { describe, expect, it } from "vitest";
import { trackersOf, withTrackers } from "./trackers";

describe("trackers in the spec", () => {
  it("sets telemetry.trackers and keeps the other telemetry fields", () => {
    const spec = { name: "x", telemetry: { samples_per_iteration: 4 } };
    expect(withTrackers(spec, [{ type: "tensorboard" }, { type: "wandb", mode: "offline" }])).toEqual({
      name: "x",
      telemetry: { samples_per_iteration: 4, trackers: [{ type: "tensorboard" }, { type: "wandb", mode: "offline" }] },
    });
  });

  it("leaves a spec without trackers alone, and clears a cloned spec's trackers when all are unticked", () => {
    expect(withTrackers({ name: "x" }, [])).toEqual({ name: "x" });
    expect(withTrackers({ telemetry: { trackers: [{ type: "mlflow" }] } }, [])).toEqual({ telemetry: { trackers: [] } });
  });

  it("reads a spec's trackers (wandb defaults to online)", () => {
    expect(trackersOf({ telemetry: { trackers: [{ type: "wandb" }, { type: "mlflow", experiment: "e" }] } })).toEqual([
      { type: "wandb", mode: "online" },
      { type: "mlflow" },
    ]);
    expect(trackersOf(undefined)).toEqual([]);
  });
});
