import { describe, expect, it } from "vitest";
import { lastDays, pausedBudget } from "./budget";

describe("pausedBudget", () => {
  it("names the budget of the last budget_exceeded event unless a resume followed", () => {
    const exceeded = { kind: "budget_exceeded", data: { budget: "limits.max_device_seconds" } };
    expect(pausedBudget([{ kind: "status" }, exceeded])).toBe("limits.max_device_seconds");
    expect(pausedBudget([exceeded, { kind: "budget_resumed", data: { budget: "limits.max_device_seconds" } }])).toBeNull();
    expect(pausedBudget([{ kind: "status" }])).toBeNull();
  });
});

describe("lastDays", () => {
  it("lists the last days in UTC, oldest first", () => {
    expect(lastDays(3, new Date(Date.UTC(2026, 2, 1, 23, 30)))).toEqual(["2026-02-27", "2026-02-28", "2026-03-01"]);
  });
});
