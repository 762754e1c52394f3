/** Routes and the signed-in shell (navigation, team switcher). Hash routing: the API serves one index.html. */
import { HashRouter, Navigate, NavLink, Route, Routes } from "react-router";
import { AlertsPage } from "./pages/Alerts";
import { ClusterPage } from "./pages/Cluster";
import { ComparePage } from "./pages/Compare";
import { DatasetsPage } from "./pages/Datasets";
import { DeploymentsPage } from "./pages/Deployments";
import { JobDetailPage } from "./pages/JobDetail";
import { GraderPanelPage } from "./pages/GraderPanel";
import { JobsPage } from "./pages/Jobs";
import { ModelsPage } from "./pages/Models";
import { PlannerPage } from "./pages/Planner";
import { PlaygroundPage } from "./pages/Playground";
import { SamplesSideBySidePage } from "./pages/SamplesSideBySide";
import { SessionsPage } from "./pages/Sessions";
import { SignInPage } from "./pages/SignIn";
import { SubmitJobPage } from "./pages/SubmitJob";
import { InvitationsBadge } from "./pages/InvitationsCard";
import { TeamPage } from "./pages/Team";
import { SessionProvider, useSession } from "./session";
import { NavMenu } from "./components/NavMenu";

function TeamSwitcher() {
  const { me, switchTeam } = useSession();
  if (!me) return null;
  return (
    <select
      className="team-switcher"
      aria-label="team"
      value={me.team.id}
      onChange={(e) => void switchTeam(Number(e.target.value))}
    >
      {me.teams.map((team) => (
        <option key={team.id} value={team.id}>
          {team.name}
        </option>
      ))}
    </select>
  );
}

function Shell() {
  const { me, loading, signOut, canWrite } = useSession();
  if (loading) return <div className="splash">Loading…</div>;
  if (!me) return <SignInPage />;
  return (
    <div className="shell">
      <nav className="topbar">
        <span className="brand">StreamRL</span>
        <NavMenu>
        <NavLink to="/jobs">Jobs</NavLink>
        <NavLink to="/sessions">Sessions</NavLink>
        {canWrite ? <NavLink to="/submit">Submit job</NavLink> : null /* viewers cannot submit: not offered */}
        <NavLink to="/models">Models</NavLink>
        <NavLink to="/datasets">Datasets</NavLink>
        <NavLink to="/deployments">Deployments</NavLink>
        {canWrite ? <NavLink to="/playground">Playground</NavLink> : null /* chat completions need member */}
        <NavLink to="/graders">Graders</NavLink>
        <NavLink to="/planner">Planner</NavLink>
        <NavLink to="/cluster">Cluster</NavLink>
        <NavLink to="/team">Team <InvitationsBadge /></NavLink>
        <NavLink to="/alerts">Alerts</NavLink>
        <span className="spacer" />
        <TeamSwitcher />
        <span className="whoami" data-testid="whoami">
          {me.user.email} · {me.role}
        </span>
        <button className="link" onClick={signOut}>
          Sign out
        </button>
        </NavMenu>
      </nav>
      <main className="content" key={me.team.id /* a team switch remounts every page */}>
        <Routes>
          <Route path="/" element={<Navigate to="/jobs" replace />} />
          <Route path="/jobs" element={<JobsPage />} />
          <Route path="/jobs/:jobId" element={<JobDetailPage />} />
          <Route path="/compare" element={<ComparePage />} />
          <Route path="/samples" element={<SamplesSideBySidePage />} />
          <Route path="/submit" element={<SubmitJobPage />} />
          <Route path="/models" element={<ModelsPage />} />
          <Route path="/datasets" element={<DatasetsPage />} />
          <Route path="/deployments" element={<DeploymentsPage />} />
          <Route path="/playground" element={<PlaygroundPage />} />
          <Route path="/graders" element={<GraderPanelPage />} />
          <Route path="/planner" element={<PlannerPage />} />
          <Route path="/cluster" element={<ClusterPage />} />
          <Route path="/team" element={<TeamPage />} />
          <Route path="/alerts" element={<AlertsPage />} />
          <Route path="/sessions" element={<SessionsPage />} />
          <Route path="*" element={<Navigate to="/jobs" replace />} />
        </Routes>
      </main>
    </div>
  );
}

export function App() {
  return (
    <SessionProvider>
      <HashRouter>
        <Shell />
      </HashRouter>
    </SessionProvider>
  );
}
