/**
 * Registered models of the team (what the submit form offers) with their version, state and card, and registering
 * one: by server-side path, or by Hugging Face Hub id + revision (downloaded in the background; the table follows its
 * progress until it is ready or failed). A name registered again is listed as its next version (a job takes the
 * newest); a ready version downloads from its row as a tar of its directory; a version is deleted from its row, refused
 * (409, shown) while an unfinished job uses it.
 */
import { useEffect, useState, type FormEvent } from "react";
import { api, unwrap } from "../api/client";
import type { Model } from "../api/types";
import { Card, ErrorBanner, formatTime } from "../components/ui";
import { download } from "../lib/download";
import { useApiQuery } from "../lib/queries";

const megabytes = (bytes: number) => `${(bytes / 1e6).toFixed(1)} MB`;

function ModelCardCell({ model }: { model: Model }) {
  if (model.state === "failed") return <span className="warn" data-testid="model-error">{model.error}</span>;
  if (model.state === "downloading") {
    const done = model.progress?.done_bytes ?? 0;
    const total = model.progress?.total_bytes ?? 0;
    return <span>downloading {total ? `${megabytes(done)} of ${megabytes(total)}` : "…"}</span>;
  }
  const card = model.card;
  if (!card) return <span className="muted">–</span>;
  return (
    <span data-testid="model-card">
      {card.architecture} · {card.parameters ? `${(card.parameters / 1e6).toFixed(2)}M params` : "params ?"} ·{" "}
      {card.dtype ?? "dtype ?"} · context {card.context_length ?? "?"} · vocab {card.vocab_size} · chat template{" "}
      {card.chat_template ? "yes" : "no"} · {megabytes(card.disk_bytes)}
    </span>
  );
}

export function ModelsCard({ canWrite }: { canWrite: boolean }) {
  const models = useApiQuery(["models"], () => unwrap(api.GET("/api/v1/models")));
  const [name, setName] = useState("");
  const [source, setSource] = useState("");
  const [revision, setRevision] = useState("main");
  const [fromHub, setFromHub] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const downloading = models.data?.data.some((m) => m.state === "downloading") ?? false;

  useEffect(() => {
    if (!downloading) return;
    const timer = window.setInterval(() => void models.reload(), 1000);
    return () => window.clearInterval(timer);
  }, [downloading, models]);

  const [busy, setBusy] = useState<number | null>(null);
  const save = async (model: Model) => {
    setError(null);
    setBusy(model.id);
    try {
      await download(`/api/v1/models/${model.id}/export.tar`, `${model.name}-v${model.version}.tar`);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(null);
    }
  };

  const remove = async (model: Model) => {
    if (!window.confirm(`Delete model "${model.name}" version ${model.version}?`)) return;
    setError(null);
    try {
      await unwrap(api.DELETE("/api/v1/models/{model_id}", { params: { path: { model_id: model.id } } }));
      await models.reload();
    } catch (err) {
      setError(err);
    }
  };

  const register = async (e: FormEvent) => {
    e.preventDefault();
    setError(null);
    try {
      const body = fromHub ? { name, hub_id: source, revision } : { name, path: source };
      await unwrap(api.POST("/api/v1/models", { body }));
      setName("");
      setSource("");
      await models.reload();
    } catch (err) {
      setError(err);
    }
  };

  return (
    <Card title="Models">
      <ErrorBanner error={error ?? models.error} />
      <div className="table-scroll">
        <table className="table compact" data-testid="models">
          <thead>
            <tr><th>Name</th><th>Version</th><th>State</th><th>Model card</th><th>Source</th><th>Registered</th><th /></tr>
          </thead>
          <tbody>
            {models.data?.data.map((m, i, all) => {
              const newest = all.findIndex((other) => other.name === m.name) === i; // listed newest version first
              return (
                <tr key={m.id} data-testid={newest ? `model-${m.name}` : `model-${m.name}-v${m.version}`}>
                  <td>{m.name}</td>
                  <td data-testid="model-version">v{m.version}{newest && m.version > 1 ? <span className="pill">newest</span> : null}</td>
                  <td>{m.state}</td>
                  <td><ModelCardCell model={m} /></td>
                  <td>{m.source === "hub" ? <code>{m.hub_id}@{m.revision}</code> : <code title={m.path}>{m.source}</code>}</td>
                  <td>{formatTime(m.created_at)}</td>
                  <td>
                    {m.state === "ready" ? (
                      <button className="link" aria-label={`download ${m.name} v${m.version}`} disabled={busy === m.id}
                              title="the model's directory as a tar (HF layout); CLI: streamrl models download"
                              onClick={() => void save(m)}>{busy === m.id ? "downloading…" : "⬇ download"}</button>
                    ) : null}
                    {canWrite ? (
                      <button className="link danger" aria-label={`delete ${m.name} v${m.version}`} onClick={() => void remove(m)}>delete</button>
                    ) : null}
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      </div>
      {canWrite ? (
        <form className="row inline-form" onSubmit={register}>
          <input name="model_name" placeholder="model name" value={name} onChange={(e) => setName(e.target.value)} required />
          <select name="model_source" value={fromHub ? "hub" : "path"} onChange={(e) => setFromHub(e.target.value === "hub")}>
            <option value="path">server directory</option>
            <option value="hub">Hugging Face Hub</option>
          </select>
          <input
            name="model_path"
            placeholder={fromHub ? "owner/name on the Hub" : "path on the server (under the artifact dir)"}
            value={source}
            onChange={(e) => setSource(e.target.value)}
            required
          />
          {fromHub ? <input name="model_revision" placeholder="revision" value={revision} onChange={(e) => setRevision(e.target.value)} /> : null}
          <button type="submit" title="a name already registered gets its next version">Register model</button>
        </form>
      ) : null}
    </Card>
  );
}
