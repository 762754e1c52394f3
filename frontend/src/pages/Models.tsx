/**
 * Models page (`#/models`, in the navigation): the team's registered models with their state and card, registering
 * one from a server directory or the Hugging Face Hub (ModelsCard), and uploading a model directory as an archive
 * (.tar, .tar.gz, .tgz, .zip) with its progress (POST /models/upload).
 */
import { useState } from "react";
import type { Model } from "../api/types";
import { Card, ErrorBanner } from "../components/ui";
import { queryClient } from "../lib/queries";
import { progressText, uploadWithProgress, type UploadProgress } from "../lib/upload";
import { useSession } from "../session";
import { ModelsCard } from "./ModelsCard";

const ARCHIVE = /\.(tar|tar\.gz|tgz|tar\.bz2|tar\.xz|zip)$/;

function ModelUploadCard() {
  const [file, setFile] = useState<File | null>(null);
  const [name, setName] = useState("");
  const [progress, setProgress] = useState<UploadProgress | null>(null);
  const [done, setDone] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);
  const busy = progress !== null && done === null && error === null;

  const upload = async () => {
    if (!file) return;
    const form = new FormData();
    form.append("file", file);
    form.append("name", name || file.name.replace(ARCHIVE, ""));
    setError(null);
    setDone(null);
    setProgress({ sent: 0, total: file.size });
    try {
      const model = await uploadWithProgress<Model>("/api/v1/models/upload", form, setProgress);
      setDone(`registered ${model.name} (${model.state})`);
      await queryClient.invalidateQueries({ queryKey: ["models"] });
    } catch (err) {
      setError(err);
    }
  };

  return (
    <Card title="Upload a model">
      <p className="muted">
        A Hugging Face model directory (config.json, weights, tokenizer) packed as .tar(.gz) or .zip; links, absolute
        paths and <code>..</code> are refused. It is checked on arrival and appears in the table when ready.
      </p>
      <ErrorBanner error={error} />
      <div className="row inline-form">
        <input name="model_archive" type="file" accept=".tar,.gz,.tgz,.bz2,.xz,.zip" onChange={(e) => setFile(e.target.files?.[0] ?? null)} />
        <input name="upload_model_name" placeholder="model name (default: file name)" value={name} onChange={(e) => setName(e.target.value)} />
        <button type="button" onClick={() => void upload()} disabled={!file || busy}>{busy ? "Uploading…" : "Upload model"}</button>
      </div>
      {progress ? (
        <div data-testid="model-upload-progress">
          <progress max={progress.total || 1} value={progress.sent} /> <span className="muted">{progressText(progress)}</span>
        </div>
      ) : null}
      {done ? <p data-testid="model-upload-done">{done}</p> : null}
    </Card>
  );
}

export function ModelsPage() {
  const { canWrite } = useSession();
  return (
    <div>
      <h2>Models</h2>
      <div className="grid">
        <ModelsCard canWrite={canWrite} />
        {canWrite ? <ModelUploadCard /> : null}
      </div>
    </div>
  );
}
