import { describe, expect, it } from "vitest";
import { ZoomGroup, zoomGroup, type XRange } from "./zoomSync";

function member(log: (XRange | null)[]) {
  return { apply: (range: XRange | null) => void log.push(range) };
}

describe("ZoomGroup", () => {
  it("zooms and resets every other chart of the group, not the one that zoomed", () => {
    const group = new ZoomGroup();
    const [a, b, c] = [[], [], []] as (XRange | null)[][];
    const ma = member(a);
    group.join(ma);
    group.join(member(b));
    const leaveC = group.join(member(c));
    group.set(ma, [2, 5]);
    expect(a).toEqual([]);
    expect(b).toEqual([[2, 5]]);
    expect(c).toEqual([[2, 5]]);
    leaveC();
    group.set(ma, null);
    expect(b).toEqual([[2, 5], null]);
    expect(c).toEqual([[2, 5]]); // gone: not told
  });

  it("gives a chart that joins late the current zoom; an emptied group forgets it", () => {
    const group = new ZoomGroup();
    const leave = group.join(member([]));
    group.set(null, [1, 3]);
    const late: (XRange | null)[] = [];
    const leaveLate = group.join(member(late));
    expect(late).toEqual([[1, 3]]);
    leave();
    leaveLate();
    expect(group.range).toBeNull();
  });

  it("is one group per key", () => {
    expect(zoomGroup("job-1")).toBe(zoomGroup("job-1"));
    expect(zoomGroup("job-1")).not.toBe(zoomGroup("job-2"));
  });
});
