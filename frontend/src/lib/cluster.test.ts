import { describe, expect, it } from "vitest";
import { capacityWarning, resourceSeries } from "./cluster";

const pools = (slots: number, busy = 0) => ({ pools: [{ pool: "generation", workers: slots ? 1 : 0, slots, busy, queue_depth: 0 }] });

describe("capacityWarning", () => {
  it("warns when the job asks for more instances than the generation pool has", () => {
    expect(capacityWarning(6, pools(4, 1))).toBe("The generation pool has 4 slot(s) (3 free); 2 of the 6 instances would stay pending until workers are added.");
    expect(capacityWarning(0 + 2, pools(0))).toContain("No generation worker is registered");
  });

  it("says nothing when the job fits or the cluster is unknown", () => {
    expect(capacityWarning(4, pools(4, 4))).toBeNull();
    expect(capacityWarning(4, null)).toBeNull();
    expect(capacityWarning(null, pools(1))).toBeNull();
  });
});

describe("resourceSeries", () => {
  it("puts samples on a seconds-before-now axis", () => {
    const worker = { samples: [{ at: 100, cpu_percent: 10, memory_mb: 50, host_memory_percent: 1 }, { at: 105, cpu_percent: 30, memory_mb: 60, host_memory_percent: 1 }] };
    expect(resourceSeries(worker, (s) => s.cpu_percent)).toEqual([{ x: -5, y: 10 }, { x: 0, y: 30 }]);
  });
});
