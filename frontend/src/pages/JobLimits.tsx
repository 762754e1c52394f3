/** The job's `limits` (device-seconds, tokens) beside what it used, editable by members; a job the controller paused
 * at a limit says so, and raising the limit resumes it (docs/user-guide.md#usage-and-budgets). */
import { useEffect, useState, type FormEvent } from "react";
import { api, unwrap } from "../api/client";
import type { components } from "../api/schema";
import type { Job, JobEvent } from "../api/types";
import { Card, ErrorBanner, Field } from "../components/ui";
import { pausedBudget } from "../lib/budget";
import { useApiQuery } from "../lib/queries";

type UsageAnswer = components["schemas"]["UsagePublic"];
const TERMINAL = ["succeeded", "failed", "cancelled"];

interface Limits {
  max_device_seconds?: number | null;
  max_tokens?: number | null;
}

function share(used: number, limit: number | null | undefined): string {
  return limit ? ` of ${limit.toLocaleString()} (${Math.round((100 * used) / limit)}%)` : " (no limit)";
}

export function JobLimits({ job, events, canWrite, onChange }: { job: Job; events: JobEvent[]; canWrite: boolean; onChange: (job: Job) => void }) {
  const limits = ((job.spec as { limits?: Limits }).limits ?? {}) as Limits;
  const usage = useApiQuery(["usage", "job", job.id, job.progress?.iteration ?? 0], () =>
    unwrap(api.GET("/api/v1/usage", { params: { query: { group_by: "job", job_id: job.id, from: "2000-01-01" } } })) as Promise<UsageAnswer>);
  const [seconds, setSeconds] = useState("");
  const [tokens, setTokens] = useState("");
  const [error, setError] = useState<unknown>(null);
  const [saved, setSaved] = useState(false);
  useEffect(() => {
    setSeconds(limits.max_device_seconds == null ? "" : String(limits.max_device_seconds));
    setTokens(limits.max_tokens == null ? "" : String(limits.max_tokens));
  }, [job.id, limits.max_device_seconds, limits.max_tokens]);
  const used = usage.data?.rows[0];
  const usedTokens = used ? used.tokens_generated + used.tokens_trained : 0;
  const paused = job.status === "paused" ? pausedBudget(events) : null;

  const save = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    setSaved(false);
    const body = { limits: { max_device_seconds: seconds.trim() ? Number(seconds) : null, max_tokens: tokens.trim() ? Number(tokens) : null } };
    try {
      onChange(await unwrap(api.PATCH("/api/v1/jobs/{job_id}", { params: { path: { job_id: job.id } }, body })));
      setSaved(true);
      await usage.reload();
    } catch (err) {
      setError(err);
    }
  };

  return (
    <Card title="Limits and usage">
      <div data-testid="job-limits">
        <ErrorBanner error={error ?? usage.error} />
        {paused ? (
          <p className="banner banner-warn" data-testid="budget-paused">
            Paused at 100% of {paused}; {paused.startsWith("limits.") ? "raise the limit below to resume it." : "an admin can raise the team's monthly budget (Team page) to resume it."}
          </p>
        ) : null}
        <p>Device-seconds used: {(used?.device_seconds ?? 0).toFixed(1)}{share(used?.device_seconds ?? 0, limits.max_device_seconds)}</p>
        <p>Tokens used (generated + trained): {usedTokens.toLocaleString()}{share(usedTokens, limits.max_tokens)}</p>
        {canWrite && !TERMINAL.includes(job.status) ? (
          <form onSubmit={save} className="row inline-form">
            <Field label="Max device-seconds (empty: none)">
              <input name="max_device_seconds" inputMode="decimal" value={seconds} onChange={(e) => setSeconds(e.target.value)} />
            </Field>
            <Field label="Max tokens (empty: none)">
              <input name="max_tokens" inputMode="numeric" value={tokens} onChange={(e) => setTokens(e.target.value)} />
            </Field>
            <button type="submit">Save limits</button> {saved ? <span className="muted">saved</span> : null}
          </form>
        ) : null}
      </div>
    </Card>
  );
}
