/** Planner what-if page (filled in once POST /api/v1/plans is in the API schema). */
export function PlannerPage() {
  return <p className="muted">The planner is not available on this server yet.</p>;
}
