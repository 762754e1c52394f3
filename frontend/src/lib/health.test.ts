import { describe, expect, it } from "vitest";
import { bannerText, currentRate, healthBadgeLabel, liveIndicator, signalChips, type Signal } from "./health";

const health = (state: string, healthy = false) => ({ state, healthy, summary: "" }) as Parameters<typeof healthBadgeLabel>[1];

describe("healthBadgeLabel", () => {
  it("says nothing that the status badge already says (no 'failed failed')", () => {
    expect(healthBadgeLabel("failed", health("failed"))).toBeNull();
    expect(healthBadgeLabel("succeeded", health("succeeded", true))).toBeNull();
    expect(healthBadgeLabel("cancelled", health("cancelled", true))).toBeNull();
    expect(healthBadgeLabel("queued", health("queued", true))).toBeNull();
  });

  it("never shows a health computed for the previous status ('paused' after a resume)", () => {
    expect(healthBadgeLabel("running", health("paused", true))).toBeNull();
    expect(healthBadgeLabel("paused", health("stalled"))).toBeNull();
  });

  it("labels what a running job is doing", () => {
    expect(healthBadgeLabel("running", health("generating", true))).toBe("healthy");
    expect(healthBadgeLabel("running", health("stalled"))).toBe("stalled");
    expect(healthBadgeLabel("running", health("training_signal"))).toBe("not learning");
  });
});

describe("bannerText", () => {
  it("does not repeat the label ('stalled: stalled: ...')", () => {
    expect(bannerText("stalled", "stalled: no iteration for 130 s")).toBe("stalled: no iteration for 130 s");
    expect(bannerText("failed", "failed: failed: boom")).toBe("failed: boom");
    expect(bannerText("stalled", "no iteration for 130 s")).toBe("stalled: no iteration for 130 s");
    expect(bannerText("paused", "paused")).toBe("paused");
    expect(bannerText("driver lost", "driver lost: no heartbeat for 70 s")).toBe("driver lost: no heartbeat for 70 s");
    expect(bannerText("restarting driver", "restarting: driver epoch 2 is loading")).toBe("restarting: driver epoch 2 is loading");
    expect(bannerText("resuming", "resuming from checkpoint 4: no iteration since")).toBe("resuming from checkpoint 4: no iteration since");
  });
});

describe("liveIndicator", () => {
  it("is green only while connected to a job that can still change", () => {
    expect(liveIndicator("running", true).tone).toBe("on");
    expect(liveIndicator("running", false).tone).toBe("off");
    expect(liveIndicator("succeeded", true)).toEqual({ tone: "ended", title: "succeeded: no more live updates" });
    expect(liveIndicator("failed", true).tone).toBe("ended");
  });
});

describe("currentRate", () => {
  it("shows no stale rate for a paused or stalled job", () => {
    expect(currentRate("paused", health("paused", true), 12.5)).toEqual({ value: null, note: "paused" });
    expect(currentRate("running", health("stalled"), 12.5)).toEqual({ value: null, note: "stalled" });
    expect(currentRate("queued", health("queued", true), 12.5)).toEqual({ value: null });
  });

  it("shows the newest rate while producing, and the final one after the end", () => {
    expect(currentRate("running", health("generating", true), 12.5)).toEqual({ value: 12.5 });
    expect(currentRate("succeeded", health("succeeded", true), 12.5)).toEqual({ value: 12.5, note: "final" });
    expect(currentRate("running", health("generating", true), undefined)).toEqual({ value: null });
  });
});

describe("signalChips", () => {
  it("puts errors first with the message as the title", () => {
    const signals: Signal[] = [
      { check: "all_truncated", severity: "warning", message: "every sample was cut", since_iteration: 1 },
      { check: "reward_constant", severity: "error", message: "reward is constant", since_iteration: 1 },
    ];
    expect(signalChips(signals)).toEqual([
      { text: "reward constant", title: "reward is constant", tone: "bad" },
      { text: "all truncated", title: "every sample was cut", tone: "warn" },
    ]);
  });
});
