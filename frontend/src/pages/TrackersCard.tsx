/** Team settings → experiment trackers: the team's MLflow and W&B connections (secrets write-only: set / not set). */
import { useState, type FormEvent } from "react";
import { useQuery } from "@tanstack/react-query";
import { api, ApiError, unwrap } from "../api/client";
import type { components } from "../api/schema";
import { Card, ErrorBanner, Field, formatTime } from "../components/ui";
import { queryClient } from "../lib/queries";

type Connection = components["schemas"]["TrackerCredentialsPublic"];
type Kind = Connection["kind"];
const FIELDS: Record<Kind, { name: string; label: string; secret?: boolean }[]> = {
  mlflow: [
    { name: "tracking_uri", label: "Tracking URI" },
    { name: "token", label: "Bearer token", secret: true },
    { name: "username", label: "Username (basic auth)" },
    { name: "password", label: "Password", secret: true },
  ],
  wandb: [
    { name: "api_key", label: "API key", secret: true },
    { name: "entity", label: "Entity" },
    { name: "base_url", label: "Server (self-hosted; empty: the cloud)" },
  ],
};
const KEY = ["trackers"];
const URL_FIELD: Record<Kind, string> = { mlflow: "tracking_uri", wandb: "base_url" };

export function TrackersCard({ isAdmin }: { isAdmin: boolean }) {
  const list = useQuery({ queryKey: KEY, queryFn: () => unwrap(api.GET("/api/v1/trackers")) });
  const byKind = new Map((list.data?.data ?? []).map((c) => [c.kind, c]));
  return (
    <Card title="Experiment trackers">
      <ErrorBanner error={list.error} />
      <p className="muted">
        Jobs that list a tracker in <code>telemetry.trackers</code> are mirrored to it by the platform with these
        credentials (TensorBoard needs none: event files land in the job's artifacts).
      </p>
      {(["mlflow", "wandb"] as Kind[]).map((kind) => (
        <TrackerForm key={`${kind}-${byKind.get(kind)?.updated_at ?? "none"}`} kind={kind} current={byKind.get(kind)} isAdmin={isAdmin} />
      ))}
    </Card>
  );
}

function TrackerForm({ kind, current, isAdmin }: { kind: Kind; current?: Connection; isAdmin: boolean }) {
  const shown = current as Record<string, unknown> | undefined;
  const [values, setValues] = useState<Record<string, string>>(() =>
    Object.fromEntries(FIELDS[kind].filter((f) => !f.secret).map((f) => [f.name, String(shown?.[f.name] ?? "")])),
  );
  const [error, setError] = useState<unknown>(null);
  const fields = error instanceof ApiError ? error.fields : {};
  const reload = () => queryClient.invalidateQueries({ queryKey: KEY });
  // a new server URL drops the stored secrets not given again in the same save (they never follow a URL change)
  const moved = current !== undefined && (values[URL_FIELD[kind]] ?? "") !== String(shown?.[URL_FIELD[kind]] ?? "");
  const secretHint = (name: string) =>
    !current?.secrets[name] ? "not set" : moved ? "set, but forgotten on save: the server URL changed (enter it again)"
      : "set (leave empty to keep it)";

  const save = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    // empty plain fields are left out; an empty secret keeps the stored one
    const body = Object.fromEntries(Object.entries(values).filter(([, v]) => v !== ""));
    try {
      await unwrap(api.PUT("/api/v1/trackers/{kind}", { params: { path: { kind } }, body }));
      await reload();
    } catch (err) {
      setError(err);
    }
  };
  const remove = async () => {
    try {
      await unwrap(api.DELETE("/api/v1/trackers/{kind}", { params: { path: { kind } } }));
      await reload();
    } catch (err) {
      setError(err);
    }
  };

  return (
    <form onSubmit={save} data-testid={`tracker-${kind}`} className="tracker-form">
      <h4>
        {kind === "mlflow" ? "MLflow" : "Weights & Biases"}{" "}
        <span className="muted">{current ? `saved ${formatTime(current.updated_at)}` : "not connected"}</span>
      </h4>
      <ErrorBanner error={error} />
      {FIELDS[kind].map((f) => (
        <Field key={f.name} label={f.label} error={fields[f.name]}
          hint={f.secret ? secretHint(f.name) : undefined}>
          <input name={f.name} type={f.secret ? "password" : "text"} autoComplete={f.secret ? "new-password" : "off"}
            value={values[f.name] ?? ""} disabled={!isAdmin}
            onChange={(e) => setValues({ ...values, [f.name]: e.target.value })} />
        </Field>
      ))}
      {isAdmin ? (
        <span className="row">
          <button type="submit">Save {kind}</button>
          {current ? <button type="button" className="link danger" onClick={() => void remove()}>remove</button> : null}
        </span>
      ) : null}
    </form>
  );
}
