/**
 * Models page (`#/models`, in the navigation): the team's registered models with their versions, state and card,
 * registering one from a server directory or the Hugging Face Hub and deleting a version (ModelsCard), and uploading
 * a model directory as an archive (.tar, .tar.gz, .tgz, .zip) with its progress (POST /models/upload); a name
 * already registered gets its next version.
 */
import type { Model } from "../api/types";
import { Card } from "../components/ui";
import { FileUpload } from "../components/FileUpload";
import { queryClient } from "../lib/queries";
import { useSession } from "../session";
import { ModelsCard } from "./ModelsCard";

function ModelUploadCard() {
  return (
    <Card title="Upload a model">
      <p className="muted">
        A Hugging Face model directory (config.json, weights, tokenizer) packed as .tar(.gz) or .zip; links, absolute
        paths and <code>..</code> are refused. It is checked on arrival and appears in the table when ready; a name
        already registered becomes its next version.
      </p>
      <FileUpload<Model>
        url="/api/v1/models/upload"
        accept=".tar,.gz,.tgz,.bz2,.xz,.zip"
        extensions={/\.(tar|tar\.gz|tgz|tar\.bz2|tar\.xz|zip)$/}
        fileInput="model_archive"
        nameInput="upload_model_name"
        namePlaceholder="model name (default: file name)"
        button="Upload model"
        testId="model-upload"
        describe={(m) => `registered ${m.name} v${m.version} (${m.state})`}
        onUploaded={() => queryClient.invalidateQueries({ queryKey: ["models"] })}
      />
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
