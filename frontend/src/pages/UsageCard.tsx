/** The Team page's usage: device-hours per day (generation and training) over the last 30 days, this month's use
 * against the team's monthly budget (admins set it here), and who used what (by job and by API key), with CSV. */
import { useState, type FormEvent } from "react";
import { api, unwrap } from "../api/client";
import type { components } from "../api/schema";
import { BarChart } from "../components/BarChart";
import { Card, Field } from "../components/ui";
import { lastDays } from "../lib/budget";
import { download } from "../lib/download";
import { useApiQuery } from "../lib/queries";

const DAYS = 30;
const GEN_COLOR = "#60a5fa";
const TRAIN_COLOR = "#f59e0b";

function hours(seconds: number): string {
  return (seconds / 3600).toFixed(seconds >= 36 ? 2 : 4);
}

interface UsageRow {
  id?: number | null;
  name: string;
  generation_device_seconds: number;
  training_device_seconds: number;
  device_seconds: number;
  tokens_generated: number;
  tokens_trained: number;
}

function UsageTable({ rows, label, testId }: { rows: UsageRow[]; label: string; testId: string }) {
  return (
    <table className="table compact" data-testid={testId}>
      <thead>
        <tr><th>{label}</th><th>Generation h</th><th>Training h</th><th>Tokens generated</th><th>Tokens trained</th></tr>
      </thead>
      <tbody>
        {rows.length === 0 ? <tr><td colSpan={5} className="muted">nothing recorded this month</td></tr> : null}
        {rows.slice(0, 10).map((r) => (
          <tr key={`${r.id ?? "none"}-${r.name}`}>
            <td>{r.id != null && label === "Job" ? `#${r.id} ${r.name}` : r.name}</td>
            <td>{hours(r.generation_device_seconds)}</td>
            <td>{hours(r.training_device_seconds)}</td>
            <td>{r.tokens_generated.toLocaleString()}</td>
            <td>{r.tokens_trained.toLocaleString()}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

type UsageAnswer = components["schemas"]["UsagePublic"];

/** GET /usage as JSON (the route also answers CSV, so its generated type is a union). */
function usage(query: { group_by: "team" | "job" | "key" | "day"; from?: string }): Promise<UsageAnswer> {
  return unwrap(api.GET("/api/v1/usage", { params: { query } })) as Promise<UsageAnswer>;
}

export function UsageCard({ isAdmin, onError }: { isAdmin: boolean; onError: (err: unknown) => void }) {
  const days = lastDays(DAYS);
  const since = days[0];
  const daily = useApiQuery(["usage", "day", since], () => usage({ group_by: "day", from: since }));
  const byJob = useApiQuery(["usage", "job"], () => usage({ group_by: "job" }));
  const byKey = useApiQuery(["usage", "key"], () => usage({ group_by: "key" }));
  const perDay = new Map((daily.data?.rows ?? []).map((r) => [r.name, r]));
  const training = days.map((d) => (perDay.get(d)?.training_device_seconds ?? 0) / 3600);
  const total = days.map((d) => (perDay.get(d)?.device_seconds ?? 0) / 3600);
  const budget = byJob.data?.budget;
  const reload = async () => {
    await Promise.all([daily.reload(), byJob.reload(), byKey.reload()]);
  };
  return (
    <Card
      title="Usage"
      className="wide"
      actions={<button type="button" className="link" onClick={() => void download("/api/v1/usage?group_by=job&format=csv", "usage.csv").catch(onError)}>CSV by job</button>}
    >
      <div data-testid="usage">
        {budget ? <BudgetLine used={budget.used_device_hours_this_month} limit={budget.max_device_hours_per_month ?? null} /> : null}
        <p className="muted">Device-hours per day (UTC), last {DAYS} days: generation on top of training.</p>
        <BarChart
          categories={days.map((d) => d.slice(5))}
          series={[
            { label: "generation device-h", color: GEN_COLOR, values: total },
            { label: "training device-h", color: TRAIN_COLOR, values: training },
          ]}
          height={180}
          yLabel="device-h"
        />
        <h4>This month by job</h4>
        <UsageTable rows={byJob.data?.rows ?? []} label="Job" testId="usage-by-job" />
        <h4>This month by API key</h4>
        <UsageTable rows={byKey.data?.rows ?? []} label="API key" testId="usage-by-key" />
        {isAdmin && budget ? <BudgetForm current={budget.max_device_hours_per_month ?? null} onError={onError} after={reload} /> : null}
      </div>
    </Card>
  );
}

function BudgetLine({ used, limit }: { used: number; limit: number | null }) {
  if (limit == null) {
    return <p data-testid="usage-budget">This month: {used.toFixed(3)} device-hours (no monthly budget).</p>;
  }
  const share = limit > 0 ? used / limit : 1;
  return (
    <p data-testid="usage-budget" className={share >= 1 ? "danger" : share >= 0.8 ? "warning" : ""}>
      This month: {used.toFixed(3)} of {limit} device-hours ({Math.round(100 * share)}% of max_device_hours_per_month)
      {share >= 1 ? ": new jobs are refused and running ones paused until the budget is raised or the month ends" : ""}
    </p>
  );
}

function BudgetForm({ current, onError, after }: { current: number | null; onError: (err: unknown) => void; after: () => Promise<void> }) {
  const [value, setValue] = useState(current == null ? "" : String(current));
  const [saved, setSaved] = useState(false);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setSaved(false);
    const hours = value.trim() === "" ? null : Number(value);
    try {
      await unwrap(api.PATCH("/api/v1/teams/current/quotas", { body: { max_device_hours_per_month: hours } }));
      await after();
      setSaved(true);
    } catch (err) {
      onError(err);
    }
  };
  return (
    <form onSubmit={submit} className="row inline-form" data-testid="budget-form">
      <Field label="Max device-hours per month (empty: no budget)">
        <input name="max_device_hours_per_month" inputMode="decimal" value={value} onChange={(e) => setValue(e.target.value)} />
      </Field>
      <button type="submit">Save budget</button> {saved ? <span className="muted">saved</span> : null}
    </form>
  );
}
