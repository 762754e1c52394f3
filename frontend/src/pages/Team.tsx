/** The current team: members and roles, invitations (sent; and the user's own), API keys (secret shown once,
 * revocable) and quotas. */
import { useState, type FormEvent } from "react";
import { api, unwrap } from "../api/client";
import { Card, ErrorBanner, Field, formatTime } from "../components/ui";
import { useApiQuery } from "../lib/queries";
import { useSession } from "../session";
import { DatasetPreviewCard } from "./DatasetPreviewCard";
import { MyInvitations, SentInvitations } from "./InvitationsCard";
import { ModelsCard } from "./ModelsCard";
import { TrackersCard } from "./TrackersCard";
import { UsageCard } from "./UsageCard";

const ROLES = ["viewer", "member", "admin", "owner"];

export function TeamPage() {
  const { me, isAdmin, canWrite } = useSession();
  const [error, setError] = useState<unknown>(null);
  const team = useApiQuery(["team"], () => unwrap(api.GET("/api/v1/teams/current")));
  const members = useApiQuery(["team", "members"], () => unwrap(api.GET("/api/v1/teams/current/members")));
  const keys = useApiQuery(["keys"], () => unwrap(api.GET("/api/v1/keys")));

  /** Run a change then reload what it changed; errors go to the banner. Resolves to whether it succeeded. */
  const run = async (call: () => Promise<unknown>, after: () => Promise<void>): Promise<boolean> => {
    setError(null);
    try {
      await call();
      await after();
      return true;
    } catch (err) {
      setError(err);
      return false;
    }
  };

  return (
    <div>
      <div className="page-head">
        <h2>Team {me?.team.name}</h2>
        <span className="muted">your role: {me?.role}</span>
      </div>
      <ErrorBanner error={error ?? team.error ?? members.error ?? keys.error} />
      <div className="grid team-grid">
        <MyInvitations onError={setError} />
        <Card title="Members">
          <table className="table compact" data-testid="members">
            <thead>
              <tr><th>Email</th><th>Role</th><th /></tr>
            </thead>
            <tbody>
              {members.data?.map((m) => (
                <tr key={m.user_id}>
                  <td>{m.email}</td>
                  <td>
                    {isAdmin && m.role !== "owner" ? (
                      <select
                        aria-label={`role of ${m.email}`}
                        value={m.role}
                        onChange={(e) =>
                          void run(
                            () => unwrap(api.PATCH("/api/v1/teams/current/members/{user_id}", { params: { path: { user_id: m.user_id } }, body: { role: e.target.value as never } })),
                            members.reload,
                          )
                        }
                      >
                        {ROLES.filter((r) => r !== "owner").map((r) => <option key={r} value={r}>{r}</option>)}
                      </select>
                    ) : (
                      m.role
                    )}
                  </td>
                  <td>
                    {isAdmin && m.role !== "owner" ? (
                      <button
                        className="link danger"
                        onClick={() =>
                          void run(() => unwrap(api.DELETE("/api/v1/teams/current/members/{user_id}", { params: { path: { user_id: m.user_id } } })), members.reload)
                        }
                      >
                        remove
                      </button>
                    ) : null}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
          <SentInvitations isAdmin={isAdmin} isOwner={me?.role === "owner"} onError={setError} />
        </Card>

        <Card title="API keys">
          <ApiKeys keys={keys.data?.data ?? []} isAdmin={isAdmin} reload={keys.reload} onError={setError} />
        </Card>

        <ModelsCard canWrite={canWrite} />
        <DatasetPreviewCard />

        <TrackersCard isAdmin={isAdmin} />

        <Card title="Quotas">
          {team.data ? (
            <Quotas
              quotas={team.data.quotas}
              isAdmin={isAdmin}
              onSave={(body) => run(() => unwrap(api.PATCH("/api/v1/teams/current/quotas", { body })), team.reload)}
            />
          ) : null}
        </Card>

        <UsageCard isAdmin={isAdmin} onError={setError} />
      </div>
    </div>
  );
}

interface KeyRow {
  id: number;
  name: string;
  prefix: string;
  created_at: string;
  last_used_at?: string | null;
  revoked_at?: string | null;
}

function ApiKeys({ keys, isAdmin, reload, onError }: { keys: KeyRow[]; isAdmin: boolean; reload: () => Promise<void>; onError: (err: unknown) => void }) {
  const [name, setName] = useState("");
  const [secret, setSecret] = useState<string | null>(null);
  const [copied, setCopied] = useState(false);
  const create = async (e: FormEvent) => {
    e.preventDefault();
    try {
      const created = await unwrap(api.POST("/api/v1/keys", { body: { name } }));
      setSecret(created.secret);
      setName("");
      await reload();
    } catch (err) {
      onError(err);
    }
  };
  const revoke = async (id: number) => {
    try {
      await unwrap(api.DELETE("/api/v1/keys/{key_id}", { params: { path: { key_id: id } } }));
      await reload();
    } catch (err) {
      onError(err);
    }
  };
  return (
    <div>
      {secret ? (
        <div className="banner banner-info" data-testid="new-key-secret">
          Copy this key now, it is shown only once: <code className="secret">{secret}</code>
          <span className="menu">
            <button type="button" onClick={() => void navigator.clipboard.writeText(secret).then(() => setCopied(true))}>{copied ? "Copied" : "Copy"}</button>
            <button className="link" onClick={() => { setSecret(null); setCopied(false); }}>done</button>
          </span>
        </div>
      ) : null}
      <table className="table compact" data-testid="keys">
        <thead>
          <tr><th>Name</th><th>Prefix</th><th>Created</th><th>Last used</th><th /></tr>
        </thead>
        <tbody>
          {keys.map((k) => (
            <tr key={k.id} className={k.revoked_at ? "revoked" : ""}>
              <td>{k.name}</td>
              <td><code>{k.prefix}</code></td>
              <td>{formatTime(k.created_at)}</td>
              <td>{formatTime(k.last_used_at)}</td>
              <td>
                {k.revoked_at ? <span className="muted">revoked</span> : isAdmin ? <button className="link danger" onClick={() => void revoke(k.id)}>revoke</button> : null}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {isAdmin ? (
        <form className="row inline-form" onSubmit={create}>
          <input placeholder="key name" value={name} onChange={(e) => setName(e.target.value)} required />
          <button type="submit">Create key</button>
        </form>
      ) : null}
    </div>
  );
}

interface QuotaValues {
  max_concurrent_jobs: number;
  max_generation_instances: number;
}

function Quotas({ quotas, isAdmin, onSave }: { quotas: QuotaValues; isAdmin: boolean; onSave: (body: QuotaValues) => Promise<boolean> }) {
  const [jobs, setJobs] = useState(String(quotas.max_concurrent_jobs));
  const [instances, setInstances] = useState(String(quotas.max_generation_instances));
  const [saved, setSaved] = useState(false);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setSaved(false);
    setSaved(await onSave({ max_concurrent_jobs: Number(jobs), max_generation_instances: Number(instances) }));
  };
  return (
    <form onSubmit={submit} data-testid="quotas">
      <Field label="Max concurrent jobs">
        <input name="max_concurrent_jobs" inputMode="numeric" value={jobs} onChange={(e) => setJobs(e.target.value)} disabled={!isAdmin} />
      </Field>
      <Field label="Max generation instances (team total)">
        <input name="max_generation_instances" inputMode="numeric" value={instances} onChange={(e) => setInstances(e.target.value)} disabled={!isAdmin} />
      </Field>
      {isAdmin ? <button type="submit">Save quotas</button> : null} {saved ? <span className="muted">saved</span> : null}
    </form>
  );
}
