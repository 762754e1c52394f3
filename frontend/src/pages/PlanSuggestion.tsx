/** The planner's suggestion for the submit form (filled in once POST /api/v1/plans is in the API schema). */
import type { JobForm } from "./SubmitJob";

export function PlanSuggestion(_props: { form: JobForm; onApply: (patch: Partial<JobForm>) => void }) {
  return null;
}
