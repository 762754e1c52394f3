/** Pure helpers of the usage and budget views (pages/UsageCard.tsx, pages/JobLimits.tsx). */

/** The budget that paused the job, from its events (null once a later event resumed it). */
export function pausedBudget(events: { kind: string; data?: Record<string, unknown> | null }[]): string | null {
  for (let i = events.length - 1; i >= 0; i--) {
    const event = events[i];
    if (event.kind === "budget_resumed") return null;
    if (event.kind === "budget_exceeded") return String(event.data?.budget ?? "a limit");
  }
  return null;
}

/** The last `count` days (UTC, YYYY-MM-DD), oldest first. */
export function lastDays(count: number, now: Date = new Date()): string[] {
  const today = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate());
  return Array.from({ length: count }, (_, i) => new Date(today - (count - 1 - i) * 86_400_000).toISOString().slice(0, 10));
}
