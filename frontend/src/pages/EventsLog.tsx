/** The job's event log, newest first. */
import type { JobEvent } from "../api/types";
import { formatTime } from "../components/ui";

export function EventsLog({ events }: { events: JobEvent[] }) {
  if (events.length === 0) return <div className="muted">no events yet</div>;
  return (
    <ul className="events" data-testid="events">
      {[...events].reverse().map((e) => (
        <li key={e.id}>
          <span className="muted">{formatTime(e.created_at)}</span> <span className={`kind kind-${e.kind}`}>{e.kind}</span> {e.message}
        </li>
      ))}
    </ul>
  );
}
