/** Team settings → alerts: notification rules (webhook or e-mail), a test button and each rule's delivery log. */
import { useState, type FormEvent } from "react";
import { useQuery } from "@tanstack/react-query";
import { api, ApiError, unwrap } from "../api/client";
import type { components } from "../api/schema";
import { Card, ErrorBanner, Field, formatTime } from "../components/ui";
import { queryClient } from "../lib/queries";
import { useSession } from "../session";

type Rule = components["schemas"]["AlertRulePublic"];
type Delivery = components["schemas"]["AlertDeliveryPublic"];
type AlertEvent = Rule["events"][number];
const EVENTS: { value: AlertEvent; label: string }[] = [
  { value: "job_failed", label: "job failed" },
  { value: "job_stalled", label: "job stalled" },
  { value: "job_succeeded", label: "job succeeded" },
  { value: "training_signal", label: "training-signal warning" },
  { value: "training_mismatch", label: "training-inference mismatch high" },
  { value: "budget", label: "budget at 80% / paused at 100%" },
];
const RULES_KEY = ["alerts", "rules"];
const deliveriesKey = (ruleId: number) => ["alerts", "rules", ruleId, "deliveries"];

export function AlertsPage() {
  const { isAdmin } = useSession();
  const [error, setError] = useState<unknown>(null);
  const [secret, setSecret] = useState<string | null>(null);
  const [editing, setEditing] = useState<Rule | null>(null);
  const [logOf, setLogOf] = useState<number | null>(null);
  const [formKey, setFormKey] = useState(0); // a new key empties the form after each save
  const rules = useQuery({ queryKey: RULES_KEY, queryFn: () => unwrap(api.GET("/api/v1/alerts/rules")) });
  const reload = () => queryClient.invalidateQueries({ queryKey: ["alerts"] });

  const act = async (call: () => Promise<unknown>) => {
    setError(null);
    try {
      await call();
      await reload();
      return true;
    } catch (err) {
      setError(err);
      return false;
    }
  };
  const path = (rule: Rule) => ({ params: { path: { rule_id: rule.id } } });

  return (
    <div>
      <div className="page-head">
        <h2>Alerts</h2>
        <span className="muted">notify a webhook or an inbox when a job fails, stalls, succeeds or stops learning</span>
      </div>
      <ErrorBanner error={error ?? rules.error} />
      {secret ? (
        <div className="banner banner-info" data-testid="new-rule-secret">
          Webhook signing secret, shown only once: <code className="secret">{secret}</code>. Each request carries
          <code>X-StreamRL-Signature: sha256=&lt;HMAC-SHA256 of the body&gt;</code>.
          <button className="link" onClick={() => setSecret(null)}>done</button>
        </div>
      ) : null}
      <div className="grid">
        <Card title="Notification rules">
          <table className="table compact" data-testid="alert-rules">
            <thead>
              <tr><th>Name</th><th>Sends to</th><th>Events</th><th>State</th><th /></tr>
            </thead>
            <tbody>
              {rules.data?.data.map((rule) => (
                <tr key={rule.id} data-testid={`rule-${rule.id}`}>
                  <td>{rule.name}</td>
                  <td>
                    {rule.channel === "webhook" ? <code>{rule.url}</code> : rule.recipients.join(", ")}
                    {rule.channel === "webhook" ? <span className="muted"> · secret {rule.secret_set ? "set" : "not set"}</span> : null}
                  </td>
                  <td>{rule.events.join(", ")}</td>
                  <td>{rule.enabled ? "enabled" : <span className="muted">disabled</span>}</td>
                  <td className="menu">
                    <button className="link" onClick={() => setLogOf(rule.id)}>log</button>
                    {isAdmin ? (
                      <>
                        <button className="link" onClick={() => void act(async () => { await unwrap(api.POST("/api/v1/alerts/rules/{rule_id}/test", path(rule))); setLogOf(rule.id); })}>test</button>
                        <button className="link" onClick={() => setEditing(rule)}>edit</button>
                        <button className="link" onClick={() => void act(() => unwrap(api.PATCH("/api/v1/alerts/rules/{rule_id}", { ...path(rule), body: { enabled: !rule.enabled } })))}>
                          {rule.enabled ? "disable" : "enable"}
                        </button>
                        <button className="link danger" onClick={() => void act(async () => { await unwrap(api.DELETE("/api/v1/alerts/rules/{rule_id}", path(rule))); if (logOf === rule.id) setLogOf(null); })}>delete</button>
                      </>
                    ) : null}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          {rules.data?.count === 0 ? <p className="muted">No rules yet.</p> : null}
        </Card>
        {isAdmin ? (
          <Card title={editing ? `Edit rule ${editing.name}` : "New rule"}>
            <RuleForm key={`${editing?.id ?? "new"}-${formKey}`} rule={editing} onDone={async (created) => {
              if (created) setSecret(created);
              setEditing(null);
              setFormKey((k) => k + 1);
              await reload();
            }} onCancel={() => setEditing(null)} />
          </Card>
        ) : null}
        {logOf !== null ? <DeliveryLog ruleId={logOf} name={rules.data?.data.find((r) => r.id === logOf)?.name ?? ""} /> : null}
      </div>
    </div>
  );
}

/** Create (rule = null) or edit a rule; resolves `onDone` with a new webhook secret to show, if any. */
function RuleForm({ rule, onDone, onCancel }: { rule: Rule | null; onDone: (secret: string | null) => Promise<void>; onCancel: () => void }) {
  const [name, setName] = useState(rule?.name ?? "");
  const [channel, setChannel] = useState<"webhook" | "email">(rule?.channel ?? "webhook");
  const [url, setUrl] = useState(rule?.url ?? "");
  const [recipients, setRecipients] = useState(rule?.recipients.join(", ") ?? "");
  const [secret, setSecret] = useState("");
  const [events, setEvents] = useState<AlertEvent[]>(rule?.events ?? ["job_failed"]);
  const [error, setError] = useState<unknown>(null);
  const fields = error instanceof ApiError ? error.fields : {};
  const toggle = (value: AlertEvent) => setEvents(events.includes(value) ? events.filter((e) => e !== value) : [...events, value]);

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    const addresses = recipients.split(",").map((a) => a.trim()).filter(Boolean);
    const target = channel === "webhook" ? { url } : { recipients: addresses };
    try {
      if (rule) {
        await unwrap(api.PATCH("/api/v1/alerts/rules/{rule_id}", { params: { path: { rule_id: rule.id } }, body: { name, events, ...target, secret: secret || undefined } }));
        await onDone(null);
      } else {
        const created = await unwrap(api.POST("/api/v1/alerts/rules", { body: { name, events, channel, ...target, secret: secret || undefined } }));
        await onDone(created.secret ?? null);
      }
    } catch (err) {
      setError(err);
    }
  };

  return (
    <form onSubmit={submit} data-testid="rule-form">
      <ErrorBanner error={error} />
      <Field label="Name" error={fields.name}>
        <input name="name" value={name} onChange={(e) => setName(e.target.value)} required />
      </Field>
      <Field label="Channel" error={fields.channel}>
        <select name="channel" value={channel} disabled={rule !== null} onChange={(e) => setChannel(e.target.value as "webhook" | "email")}>
          <option value="webhook">webhook (signed POST)</option>
          <option value="email">e-mail</option>
        </select>
      </Field>
      {channel === "webhook" ? (
        <>
          <Field label="URL" error={fields.url}>
            <input name="url" value={url} onChange={(e) => setUrl(e.target.value)} placeholder="https://hooks.example.com/streamrl" />
          </Field>
          <Field label="Signing secret" error={fields.secret} hint={rule ? "leave empty to keep the stored one" : "leave empty to generate one"}>
            <input name="secret" type="password" value={secret} onChange={(e) => setSecret(e.target.value)} autoComplete="new-password" />
          </Field>
        </>
      ) : (
        <Field label="Recipients (comma-separated)" error={fields.recipients}>
          <input name="recipients" value={recipients} onChange={(e) => setRecipients(e.target.value)} placeholder="ml-team@example.com" />
        </Field>
      )}
      <Field label="Events" error={fields.events}>
        <span className="row">
          {EVENTS.map((event) => (
            <label key={event.value} className="check">
              <input type="checkbox" name={`event-${event.value}`} checked={events.includes(event.value)} onChange={() => toggle(event.value)} /> {event.label}
            </label>
          ))}
        </span>
      </Field>
      <button type="submit">{rule ? "Save rule" : "Create rule"}</button>
      {rule ? <button type="button" className="link" onClick={onCancel}>cancel</button> : null}
    </form>
  );
}

/** One attempt in words: the error as recorded (it names the HTTP status), else the success status. */
function attemptText(attempt: Delivery["log"][number]): string {
  if (attempt.error) return attempt.error;
  return attempt.status_code !== null && attempt.status_code !== undefined ? `HTTP ${attempt.status_code}` : "accepted";
}

function DeliveryLog({ ruleId, name }: { ruleId: number; name: string }) {
  const log = useQuery({
    queryKey: deliveriesKey(ruleId),
    queryFn: () => unwrap(api.GET("/api/v1/alerts/rules/{rule_id}/deliveries", { params: { path: { rule_id: ruleId }, query: { limit: 50 } } })),
    refetchInterval: (query) => (query.state.data?.data.some((d: Delivery) => d.state === "pending") ? 2000 : 15000),
  });
  return (
    <Card title={`Delivery log: ${name}`} className="wide">
      <ErrorBanner error={log.error} />
      <table className="table compact" data-testid="delivery-log">
        <thead>
          <tr><th>When</th><th>Event</th><th>Job</th><th>State</th><th>Attempts</th><th>Last answer</th></tr>
        </thead>
        <tbody>
          {log.data?.data.map((d) => (
            <tr key={d.id} data-testid={`delivery-${d.id}`}>
              <td>{formatTime(d.created_at)}</td>
              <td>{d.event}</td>
              <td>{d.job_id ? <a href={`#/jobs/${d.job_id}`}>{d.job_id}</a> : "–"}</td>
              <td><span className={`badge badge-${d.state === "succeeded" ? "succeeded" : d.state === "failed" ? "failed" : "queued"}`}>{d.state}</span></td>
              <td title={d.log.map((a) => `${formatTime(a.at)}: ${a.status_code ?? ""} ${a.error ?? ""}`).join("\n")}>
                {d.attempts}
                {d.state === "pending" && d.next_attempt_at ? <span className="muted"> · next {formatTime(d.next_attempt_at)}</span> : null}
              </td>
              <td>{d.log.map((a, i) => (
                <div key={i}>{attemptText(a)}</div>
              ))}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {log.data?.count === 0 ? <p className="muted">No deliveries yet.</p> : null}
    </Card>
  );
}
