/**
 * One file upload with its progress, shared by the Models page (archives), the Datasets page and the submit form's
 * dataset box: a file input, a name (default: the file's name without its extension), a button, a progress bar
 * (XMLHttpRequest upload events, lib/upload.ts), and the answer: what was stored, or the error. A 422's field
 * messages are shown alone ("line 2: invalid JSON"), not prefixed by their field path.
 */
import { useState, type ReactNode } from "react";
import { ApiError } from "../api/client";
import { progressText, uploadWithProgress, type UploadProgress } from "../lib/upload";

/** The message of a failed upload: a 422's field messages, else the error's own. */
export function uploadErrorText(caught: unknown): string {
  const lines = caught instanceof ApiError ? Object.values(caught.fields) : [];
  return lines.length ? lines.join("; ") : caught instanceof Error ? caught.message : String(caught);
}

export interface UploadState<T> {
  progress: UploadProgress | null;
  result: T | null;
  error: string | null;
  busy: boolean;
  start: (file: File, name: string) => Promise<void>;
}

/** POST `file` and `name` as multipart to `url`, following the bytes sent; `onUploaded` runs with the answer. */
export function useUpload<T>(url: string, onUploaded?: (result: T) => void | Promise<void>): UploadState<T> {
  const [progress, setProgress] = useState<UploadProgress | null>(null);
  const [result, setResult] = useState<T | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  const start = async (file: File, name: string) => {
    const form = new FormData();
    form.append("file", file);
    form.append("name", name);
    setBusy(true);
    setError(null);
    setResult(null);
    setProgress({ sent: 0, total: file.size });
    try {
      const answer = await uploadWithProgress<T>(url, form, setProgress);
      setResult(answer);
      await onUploaded?.(answer);
    } catch (caught) {
      setError(uploadErrorText(caught));
    } finally {
      setBusy(false);
    }
  };
  return { progress, result, error, busy, start };
}

export interface FileUploadProps<T> {
  url: string;
  accept: string;
  extensions: RegExp; // removed from the file name to make the default name
  fileInput: string; // the inputs' `name`s (what tests and password managers see)
  nameInput: string;
  namePlaceholder: string;
  button: string;
  testId: string; // `${testId}-progress`, `${testId}-done`
  describe: (result: T) => string;
  onUploaded?: (result: T) => void | Promise<void>;
  label?: ReactNode;
}

export function FileUpload<T>(props: FileUploadProps<T>) {
  const [file, setFile] = useState<File | null>(null);
  const [name, setName] = useState("");
  const upload = useUpload<T>(props.url, props.onUploaded);
  const go = () => {
    if (file) void upload.start(file, name.trim() || file.name.replace(props.extensions, ""));
  };

  return (
    <div className="upload">
      {props.label ? <div className="field-label">{props.label}</div> : null}
      <div className="upload-row">
        <input name={props.fileInput} type="file" accept={props.accept} onChange={(e) => setFile(e.target.files?.[0] ?? null)} />
        <input name={props.nameInput} placeholder={props.namePlaceholder} value={name} onChange={(e) => setName(e.target.value)} />
        <button type="button" onClick={go} disabled={!file || upload.busy}>{upload.busy ? "Uploading…" : props.button}</button>
      </div>
      {upload.progress ? (
        <div className="upload-progress" data-testid={`${props.testId}-progress`}>
          <progress max={upload.progress.total || 1} value={upload.progress.sent} />{" "}
          <span className="muted">{progressText(upload.progress)}</span>
        </div>
      ) : null}
      {upload.error ? <span className="field-error" role="alert">{upload.error}</span> : null}
      {upload.result ? <p className="field-hint" data-testid={`${props.testId}-done`}>{props.describe(upload.result)}</p> : null}
    </div>
  );
}
