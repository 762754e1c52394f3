/**
 * Shared x zoom of the charts of one page (all panels of a job, all compare panels): zooming one chart zooms the
 * others to the same x range, a reset resets them all. A chart joining a zoomed group takes its range. Pure (no DOM),
 * unit tested; `UPlotChart` binds uPlot to it.
 */
export type XRange = [number, number];

export interface ZoomMember {
  apply(range: XRange | null): void; // null: back to the full range
}

export class ZoomGroup {
  private readonly members = new Set<ZoomMember>();
  range: XRange | null = null;

  /** Add `member` (it takes the group's current range); returns the function that removes it. */
  join(member: ZoomMember): () => void {
    this.members.add(member);
    if (this.range) member.apply(this.range);
    return () => {
      this.members.delete(member);
      if (this.members.size === 0) this.range = null;
    };
  }

  /** `from` zoomed itself to `range` (null: reset); every other member follows. */
  set(from: ZoomMember | null, range: XRange | null): void {
    this.range = range;
    for (const member of this.members) if (member !== from) member.apply(range);
  }

  get size(): number {
    return this.members.size;
  }
}

const groups = new Map<string, ZoomGroup>();

/** The page-wide group for `key` (created on first use). */
export function zoomGroup(key: string): ZoomGroup {
  let group = groups.get(key);
  if (!group) {
    group = new ZoomGroup();
    groups.set(key, group);
  }
  return group;
}
