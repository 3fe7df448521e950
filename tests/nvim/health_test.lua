-- :checkhealth saipling, the report written to $NVIMTEST_HEALTH.
-- Env: NVIMTEST_PYTHON (empty: use a command that does not exist).
local T = SaiplingTest
T.run(function()
  local python = os.getenv("NVIMTEST_PYTHON") or ""
  local cmd = python ~= "" and { python, "-m", "saipling", "serve" } or { "saipling-not-installed-anywhere", "serve" }
  require("saipling").setup({ cmd = cmd })
  vim.cmd("checkhealth saipling")
  T.result.health = vim.api.nvim_buf_get_lines(0, 0, -1, false)
end)
