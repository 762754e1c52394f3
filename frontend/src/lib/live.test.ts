import { describe, expect, it } from "vitest";
import { mergeByKey, payloadItems } from "./live";

describe("payloadItems", () => {
  it("accepts a list, a {data} page, a {spans} page or one object", () => {
    expect(payloadItems([1, 2])).toEqual([1, 2]);
    expect(payloadItems({ data: [{ id: 1 }], count: 1 })).toEqual([{ id: 1 }]);
    expect(payloadItems({ spans: [{ lane: "a" }] }, "spans")).toEqual([{ lane: "a" }]);
    expect(payloadItems({ iteration: 3 })).toEqual([{ iteration: 3 }]);
    expect(payloadItems(null)).toEqual([]);
  });
});

describe("mergeByKey", () => {
  it("replaces redelivered items and keeps the latest max", () => {
    const cur = [{ id: 1, v: "a" }, { id: 2, v: "b" }];
    const out = mergeByKey(cur, [{ id: 2, v: "B" }, { id: 3, v: "c" }], (x) => x.id, 2);
    expect(out).toEqual([{ id: 2, v: "B" }, { id: 3, v: "c" }]);
  });
});
