import { describe, expect, it } from "vitest";
import { errorMessage, fieldErrors, fieldPath } from "./fieldErrors";

describe("fieldErrors", () => {
  it("keys 422 issues by their dotted field path without the body prefix", () => {
    const detail = [
      { loc: ["body", "generation", "batch_size"], msg: "Input should be greater than or equal to 1" },
      { loc: ["body", "dataset"], msg: "Value error, set exactly one of id, path, builtin" },
      { loc: ["body", "dataset"], msg: "second" },
    ];
    expect(fieldErrors(detail)).toEqual({
      "generation.batch_size": "Input should be greater than or equal to 1",
      dataset: "Value error, set exactly one of id, path, builtin; second",
    });
    expect(fieldPath(["query", "limit"])).toBe("limit");
  });

  it("formats string and list details", () => {
    expect(errorMessage({ detail: "quota max_generation_instances exceeded" })).toContain("max_generation_instances");
    expect(errorMessage({ detail: [{ loc: ["body", "name"], msg: "too short" }] })).toBe("name: too short");
    expect(errorMessage(null, 500)).toBe("request failed (HTTP 500)");
  });
});
