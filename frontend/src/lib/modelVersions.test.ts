import { describe, expect, it } from "vitest";
import { newestVersions } from "./modelVersions";

describe("newestVersions", () => {
  it("keeps each name once, at its newest version, in the listed order", () => {
    const models = [
      { name: "b", version: 1 },
      { name: "a", version: 2 },
      { name: "a", version: 3 },
      { name: "a", version: 1 },
    ];
    expect(newestVersions(models)).toEqual([{ name: "b", version: 1 }, { name: "a", version: 3 }]);
  });
});
